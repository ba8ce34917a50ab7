/**
 * Presence names only those the channel admits (docs/api.md, "Presence"; docs/security.md): a
 * subscriber's `sub` is listed (route `subjects`, `state` and `join`/`leave` frames) only when its
 * token grants the channel. A token for other channels subscribes to a public one anonymously:
 * counted in occupancy, never named, so nobody can read another token's subject off a public channel.
 */
import { createExecutionContext } from "cloudflare:test";
import { describe, expect, it } from "vitest";
import worker from "../../src/index";
import { BASE, envWith, freshIp, mint, uniq, until } from "../support/helpers";

type Presence = { type: string; action: string; occupancy: number; subject?: string | null; subjects?: string[] };

const e = envWith({ RELAY_CAPACITY: "2", SUBSCRIBE_BURST: "1000", READ_BURST: "1000", PRESENCE_INTERVAL: "1h" });

async function request(path: string, headers: Record<string, string>): Promise<Response> {
  const req = new Request(`${BASE}${path}`, { headers: { "cf-connecting-ip": freshIp(), ...headers } });
  return await worker.fetch(req, e, createExecutionContext());
}

/** A WebSocket subscriber with `token`, keeping its presence frames. */
async function join(ch: string, token: string | null) {
  const headers: Record<string, string> = { upgrade: "websocket" };
  if (token) headers.authorization = `Bearer ${token}`;
  const res = await request(`/v1/subscribe/${ch}?presence=1`, headers);
  if (res.status !== 101 || !res.webSocket) throw new Error(`subscribe failed: ${res.status} ${await res.text()}`);
  const ws = res.webSocket;
  const frames: Presence[] = [];
  ws.accept();
  ws.addEventListener("message", (ev) => {
    const f = JSON.parse(ev.data as string) as Presence;
    if (f.type === "presence") frames.push(f);
  });
  return { ws, frames };
}

const tokenFor = async (sub: string, channels: string[]) => (await mint({ sub, channels })).access_token;

describe("presence names only subscribers whose token grants the channel", () => {
  it("a token for other channels subscribes to a public channel anonymously: counted, not named", async () => {
    const area = uniq("names");
    const ch = `public:${area}.room`;
    const [granted, outsider] = [uniq("granted"), uniq("outsider")];
    const watcher = await join(ch, await tokenFor(granted, [`public:${area}.*`]));
    await until(() => watcher.frames.length === 1, "state");
    expect(watcher.frames[0]).toMatchObject({ action: "state", occupancy: 1, subjects: [granted] });
    // A valid token, but for another channel: its sub must not appear anywhere.
    const stranger = await join(ch, await tokenFor(outsider, ["public:elsewhere.*", "private:a.b.c"]));
    await until(() => watcher.frames.length === 2, "the outsider's join");
    expect(watcher.frames[1]).toMatchObject({ action: "join", subject: null, occupancy: 2 });
    await until(() => stranger.frames.length === 1, "the outsider's state");
    expect(stranger.frames[0]).toMatchObject({ action: "state", occupancy: 2, subjects: [granted] });
    const route = await request(`/v1/presence/${ch}`, {});
    expect(await route.json()).toEqual({ channel: ch, occupancy: 2, mode: "announce", subjects: [granted] });
    stranger.ws.close();
    await until(() => watcher.frames.length === 3, "the outsider's leave");
    expect(watcher.frames[2]).toMatchObject({ action: "leave", subject: null, occupancy: 1 });
    for (const f of [...watcher.frames, ...stranger.frames]) expect(JSON.stringify(f)).not.toContain(outsider);
    watcher.ws.close();
  });
});
