/**
 * Presence (docs/api.md, "Presence"): real sockets in workerd over several relays (RELAY_CAPACITY 2).
 * Up to PRESENCE_ANNOUNCE_MAX every join and leave reaches `presence=1` subscribers with its subject;
 * crossing it sends one `state` frame; above it one `interval` frame per PRESENCE_INTERVAL carries
 * the counts. The interval is an hour here, so only the test's own clock (the channel's alarm run
 * with a later `now`) ever ends one. `GET /v1/presence` keeps history's door; no presence frame is
 * ever in history or a resume.
 */
import { createExecutionContext, runInDurableObject } from "cloudflare:test";
import { exports } from "cloudflare:workers";
import { FloodgateClient, type PresenceFrame } from "@floodgate/client";
import { describe, expect, it } from "vitest";
import worker from "../../src/index";
import { channelStub } from "../../src/platform/stubs";
import { relayName } from "../../src/relay/placement";
import type { Relay } from "../../src/relay/relay";
import { ConfigError, parseConfig } from "../../src/settings/settings";
import { presenceTick } from "../support/channel-internals";
import { closeAndWaitTold } from "../support/closes-told";
import { BASE, env, envWith, freshIp, historyOf, mint, publishTo, uniq, until, workerSocket } from "../support/helpers";

const HOUR = 3_600_000;
const base = { RELAY_CAPACITY: "2", SUBSCRIBE_BURST: "1000", READ_BURST: "1000", PRESENCE_INTERVAL: "1h" };
const envMax = (max: number) => envWith({ ...base, PRESENCE_ANNOUNCE_MAX: String(max) });

type Presence = {
  type: "presence";
  channel: string;
  action: "state" | "join" | "leave" | "interval";
  occupancy: number;
  subject?: string | null;
  subjects?: string[];
  joined?: number;
  left?: number;
};

async function token(sub: string, channels = ["public:pres.**", "private:pres.**"]): Promise<string> {
  return (await mint({ sub, channels, rl: "100000/s" })).access_token;
}

async function request(e: Env, path: string, headers: Record<string, string>): Promise<Response> {
  return await worker.fetch(
    new Request(`${BASE}${path}`, { headers: { "cf-connecting-ip": freshIp(), ...headers } }),
    e,
    createExecutionContext(),
  );
}

/** A WebSocket subscriber (with a token when `sub` is given), keeping every frame it gets. */
async function join(e: Env, ch: string, sub: string | null, query = "?presence=1") {
  const headers: Record<string, string> = { upgrade: "websocket" };
  if (sub) headers.authorization = `Bearer ${await token(sub)}`;
  const res = await request(e, `/v1/subscribe/${ch}${query}`, headers);
  if (res.status !== 101 || !res.webSocket) throw new Error(`subscribe failed: ${res.status} ${await res.text()}`);
  const ws = res.webSocket;
  const frames: unknown[] = [];
  ws.accept();
  ws.addEventListener("message", (ev) => {
    frames.push(JSON.parse(ev.data as string));
  });
  const presence = () => frames.flat().filter((f) => (f as Presence).type === "presence") as Presence[];
  return { ws, frames, presence };
}

async function presenceOf(e: Env, ch: string, headers: Record<string, string> = {}) {
  const res = await request(e, `/v1/presence/${ch}`, headers);
  return { status: res.status, body: (await res.json()) as Record<string, unknown> };
}

/** The channel's calls to its relays for presence so far (stats `presence.sends_total`). */
async function presenceSends(e: Env, ch: string): Promise<number> {
  const res = await request(e, `/v1/channels/${ch}/stats`, { authorization: "Bearer test-admin-token" });
  return ((await res.json()) as { presence: { sends_total: number } }).presence.sends_total;
}

/** Waits until the channel counts `n` open subscriptions. */
async function occupancyIs(e: Env, ch: string, n: number): Promise<void> {
  await until(async () => (await presenceOf(e, ch)).body.occupancy === n, `occupancy ${n}`);
}

const tick = (e: Env, ch: string, now: number) =>
  runInDurableObject(channelStub(e, ch), (instance) => presenceTick(instance, now));

describe("presence in announce mode", () => {
  it("every join and leave below PRESENCE_ANNOUNCE_MAX reaches presence=1 subscribers on every relay, with its subject; anonymous ones are counted, never listed", async () => {
    const e = envMax(5);
    const ch = `public:pres.${uniq()}`;
    const [w, alice, bob] = [uniq("w"), uniq("alice"), uniq("bob")];
    const watcher = await join(e, ch, w);
    await until(() => watcher.presence().length === 1, "state");
    expect(watcher.presence()[0]).toEqual({
      type: "presence",
      channel: ch,
      action: "state",
      occupancy: 1,
      subjects: [w],
    });

    const plain = await join(e, ch, alice, ""); // no presence frames for it
    await until(() => watcher.presence().length === 2, "alice's join");
    expect(watcher.presence()[1]).toEqual({
      type: "presence",
      channel: ch,
      action: "join",
      subject: alice,
      occupancy: 2,
    });
    const anon = await join(e, ch, null); // a second relay (2 per relay)
    await until(() => watcher.presence().length === 3, "the anonymous join");
    expect(watcher.presence()[2]).toMatchObject({ action: "join", subject: null, occupancy: 3 });
    // Its own state counts itself and lists only subjects.
    await until(() => anon.presence().length >= 1, "anon state");
    expect(anon.presence()[0]).toEqual({
      type: "presence",
      channel: ch,
      action: "state",
      occupancy: 3,
      subjects: [alice, w].sort(),
    });
    const bobs = await join(e, ch, bob);
    await until(() => watcher.presence().length === 4 && anon.presence().some((p) => p.subject === bob), "bob");
    expect((await presenceOf(e, ch)).body).toEqual({
      channel: ch,
      occupancy: 4,
      mode: "announce",
      subjects: [alice, bob, w].sort(),
    });

    plain.ws.close();
    await until(() => watcher.presence().length === 5, "alice's leave");
    expect(watcher.presence()[4]).toMatchObject({ action: "leave", subject: alice, occupancy: 3 });
    await until(() => anon.presence().some((p) => p.action === "leave" && p.subject === alice), "on the other relay");
    expect(plain.frames).toEqual([]);
    // The route's answer may be up to 1 s old (shared between readers): it shows the leave within 2 s.
    const left = Date.now();
    await until(
      async () => JSON.stringify((await presenceOf(e, ch)).body.subjects) === JSON.stringify([bob, w].sort()),
      "the leave in the route's answer",
    );
    expect(Date.now() - left).toBeLessThan(2000);
    await closeAndWaitTold(ch, () => {
      for (const s of [watcher, anon, bobs]) s.ws.close();
    });
  });

  it("the state frame comes after a resume's replay, packed for batch=1, on SSE as event: presence with no id; no presence frame is in history or replayed", async () => {
    const e = envMax(5);
    const ch = `public:pres.${uniq()}`;
    const pub = await token(uniq("pub"));
    const first = await join(e, ch, uniq("a"));
    await until(() => first.presence().length === 1, "state");
    for (let i = 1; i <= 2; i++) expect((await publishTo(ch, pub, { i })).status).toBe(200);
    const packed = await join(e, ch, null, "?presence=1&batch=1&after=0");
    await until(() => packed.frames.length >= 2, "replay and state");
    expect((packed.frames[0] as unknown[]).map((f) => (f as { seq: number }).seq)).toEqual([1, 2]);
    expect(packed.frames[1]).toEqual([
      { type: "presence", channel: ch, action: "state", occupancy: 2, subjects: expect.any(Array) },
    ]);

    const res = await request(e, `/v1/subscribe/${ch}?presence=1&after=1`, { accept: "text/event-stream" });
    expect(res.status).toBe(200);
    const reader = (res.body as ReadableStream<Uint8Array>).getReader();
    let text = "";
    const decoder = new TextDecoder();
    while (!text.includes("event: presence")) text += decoder.decode((await reader.read()).value);
    expect(text).toMatch(/id: [A-Za-z0-9_-]+:2\nevent: message\n/);
    expect(text.slice(text.indexOf("event: presence"))).toMatch(
      /^event: presence\ndata: \{"type":"presence".*"action":"state","occupancy":3/,
    );
    await reader.cancel();

    expect((await historyOf(ch, null)).map((m) => m.type)).toEqual(["message", "message"]);
    // A resume replays messages only: the joins and leaves it missed are not in it.
    const resumed = await join(e, ch, null, "?presence=1&after=0");
    await until(() => resumed.frames.length >= 3, "replay and state");
    expect(resumed.frames.map((f) => (f as Presence).type)).toEqual(["message", "message", "presence"]);
    expect((resumed.frames[2] as Presence).action).toBe("state");
    await closeAndWaitTold(ch, () => {
      for (const s of [first, packed, resumed]) s.ws.close();
    });
  });

  it("presence other than 0 or 1 is refused with 400 before any upgrade", async () => {
    const ch = `public:pres.${uniq()}`;
    for (const q of ["?presence=2", "?presence=yes"]) {
      const res = await request(envMax(5), `/v1/subscribe/${ch}${q}`, { upgrade: "websocket" });
      expect(res.status).toBe(400);
      expect(await res.json()).toMatchObject({ code: "invalid_argument", msg: "presence must be 0 or 1" });
    }
  });
});

describe("presence above PRESENCE_ANNOUNCE_MAX", () => {
  it("crossing it sends one state frame; above it joins and leaves cost no frame until one interval frame per PRESENCE_INTERVAL, only when something changed", async () => {
    const e = envMax(2);
    const ch = `public:pres.${uniq()}`;
    const watcher = await join(e, ch, uniq("w"));
    const a = await join(e, ch, uniq("a"), "");
    await until(() => watcher.presence().length === 2, "a's join");
    const b = await join(e, ch, null, "");
    await until(() => watcher.presence().length === 3, "the crossing");
    expect(watcher.presence()[2]).toEqual({ type: "presence", channel: ch, action: "state", occupancy: 3 });

    const sendsBefore = await presenceSends(e, ch);
    const crowd: Awaited<ReturnType<typeof join>>[] = [];
    for (let i = 0; i < 4; i++) crowd.push(await join(e, ch, i % 2 ? uniq("c") : null, ""));
    a.ws.close();
    await occupancyIs(e, ch, 6);
    // Above the threshold a join or leave costs the channel no call to any relay.
    expect(await presenceSends(e, ch)).toBe(sendsBefore);
    expect((await presenceOf(e, ch)).body).toEqual({ channel: ch, occupancy: 6, mode: "interval" });
    expect(watcher.presence()).toHaveLength(3); // no frame per join or leave

    let clock = Date.now() + HOUR + 1;
    await tick(e, ch, clock);
    await until(() => watcher.presence().length === 4, "the interval frame");
    expect(watcher.presence()[3]).toEqual({
      type: "presence",
      channel: ch,
      action: "interval",
      occupancy: 6,
      joined: 4,
      left: 1,
    });
    // Nothing changed: no frame. A change less than an interval after the last frame waits for it.
    await tick(e, ch, clock + HOUR + 1);
    crowd.pop()?.ws.close();
    await occupancyIs(e, ch, 5);
    await tick(e, ch, clock + HOUR / 2);
    clock += HOUR + 2;
    await tick(e, ch, clock);
    await until(() => watcher.presence().length === 5, "the second interval frame");
    expect(watcher.presence()[4]).toMatchObject({ action: "interval", occupancy: 5, joined: 0, left: 1 });

    // Back to the threshold: one state frame in announce mode, with the subjects.
    for (const s of crowd) s.ws.close();
    await occupancyIs(e, ch, 2);
    await until(() => watcher.presence().at(-1)?.action === "state", "back in announce mode");
    const state = watcher.presence().at(-1) as Presence;
    expect(state).toMatchObject({ action: "state", occupancy: 2 });
    expect(state.subjects).toHaveLength(1); // the watcher; b is anonymous
    expect(watcher.presence().filter((p) => p.action === "interval")).toHaveLength(2);
    await closeAndWaitTold(ch, () => {
      for (const s of [watcher, b]) s.ws.close();
    });
  });

  it("a relay reset behind the channel's back corrects occupancy within one interval", async () => {
    const e = envMax(1);
    const ch = `public:pres.${uniq()}`;
    const watcher = await join(e, ch, uniq("w")); // relay 0
    const others: Awaited<ReturnType<typeof join>>[] = [];
    for (let i = 0; i < 3; i++) others.push(await join(e, ch, null, ""));
    await occupancyIs(e, ch, 4);
    const relay1 = env.RELAY.get(env.RELAY.idFromName(relayName(ch, "local", 1))) as DurableObjectStub<Relay>;
    await expect(
      runInDurableObject(relay1, (_r, state) => {
        state.abort("reset for the test");
      }),
    ).rejects.toThrow();
    await until(() => others.slice(1).every((s) => s.ws.readyState !== WebSocket.OPEN), "relay 1's sockets to drop");
    // The channel was not told: it still counts them, until its interval wakes the relays.
    expect((await presenceOf(e, ch)).body.occupancy).toBe(4);
    await tick(e, ch, Date.now() + HOUR + 1);
    await occupancyIs(e, ch, 2);
    await tick(e, ch, Date.now() + 2 * HOUR + 2);
    await until(() => watcher.presence().at(-1)?.occupancy === 2, "the interval frame");
    expect(watcher.presence().at(-1)).toMatchObject({ action: "interval", occupancy: 2, left: 2 });
    await closeAndWaitTold(ch, () => {
      for (const s of [watcher, ...others]) s.ws.close();
    });
  });
});

describe("GET /v1/presence", () => {
  it("a private channel's presence needs a token with subscribe scope for it, like its history", async () => {
    const e = envMax(5);
    const ch = `private:pres.team.${uniq()}`;
    const member = await token(uniq("m"));
    expect((await presenceOf(e, ch)).status).toBe(401);
    const stranger = await token(uniq("s"), ["private:other.**"]);
    expect((await presenceOf(e, ch, { authorization: `Bearer ${stranger}` })).status).toBe(403);
    const publishOnly = (await mint({ sub: uniq("p"), channels: ["private:pres.**"], scopes: ["publish"] }))
      .access_token;
    expect((await presenceOf(e, ch, { authorization: `Bearer ${publishOnly}` })).status).toBe(403);
    const ok = await presenceOf(e, ch, { authorization: `Bearer ${member}` });
    expect(ok).toEqual({ status: 200, body: { channel: ch, occupancy: 0, mode: "announce", subjects: [] } });
    expect((await presenceOf(e, "bad name!")).status).toBe(400);
  });

  it("spends the client IP's read budget, shared with history", async () => {
    const e = envWith({ ...base, READ_RATE: "1/m", READ_BURST: "2" });
    const ch = `public:pres.${uniq()}`;
    const ip = freshIp();
    const get = (path: string) => request(e, path, { "cf-connecting-ip": ip });
    expect((await get(`/v1/presence/${ch}`)).status).toBe(200);
    expect((await get(`/v1/history/${ch}`)).status).toBe(200);
    const refused = await get(`/v1/presence/${ch}`);
    expect(refused.status).toBe(429);
    expect(await refused.json()).toMatchObject({ code: "resource_exhausted", meta: { bucket: "read" } });
  });
});

describe("the client's presence", () => {
  it("onPresence asks for presence frames and gets the state then the joins; presence() answers the route", async () => {
    const ch = `public:pres.${uniq()}`;
    const me = uniq("me");
    const fg = new FloodgateClient({
      baseUrl: BASE,
      accessToken: await token(me),
      fetch: (i, init) =>
        exports.default.fetch(
          new Request(i, { ...init, headers: { ...init?.headers, "cf-connecting-ip": freshIp() } }),
        ),
      openWebSocket: workerSocket,
    });
    const seen: PresenceFrame[] = [];
    const sub = fg.subscribe(ch, () => {}, { onPresence: (p) => seen.push(p) });
    await until(() => seen.length === 1, "state");
    expect(seen[0]).toEqual({ type: "presence", channel: ch, action: "state", occupancy: 1, subjects: [me] });
    const other = await join(env, ch, null, "");
    await until(() => seen.length === 2, "the join");
    expect(seen[1]).toMatchObject({ action: "join", subject: null, occupancy: 2 });
    expect(await fg.presence(ch)).toEqual({ channel: ch, occupancy: 2, mode: "announce", subjects: [me] });
    await closeAndWaitTold(ch, () => {
      other.ws.close();
      sub.close();
    });
  });
});

describe("presence settings", () => {
  it("PRESENCE_ANNOUNCE_MAX and PRESENCE_INTERVAL default to 20 and 10s, are in the manifest, and a bad value fails closed naming it", async () => {
    const res = await request(env, "/v1/manifest", {});
    expect(((await res.json()) as { presence: unknown }).presence).toEqual({ announce_max: 20, interval: "10s" });
    const ok = parseConfig({ PUBLISH_RATE: "1/s", SUBSCRIBE_RATE: "1/s", TOKEN_ISSUE_RATE: "1/s", READ_RATE: "1/s" });
    expect([ok.presenceAnnounceMax, ok.presenceIntervalMs]).toEqual([20, 10_000]);
    const bad: [string, string][] = [
      ["PRESENCE_ANNOUNCE_MAX", "-1"],
      ["PRESENCE_ANNOUNCE_MAX", "1001"],
      ["PRESENCE_ANNOUNCE_MAX", "ten"],
      ["PRESENCE_INTERVAL", "500ms"],
      ["PRESENCE_INTERVAL", "2h"],
      ["PRESENCE_INTERVAL", "soon"],
    ];
    for (const [name, value] of bad) {
      const broken = envWith({ [name]: value });
      const answer = await request(broken, `/v1/presence/public:pres.${uniq()}`, {});
      expect(answer.status, `${name}=${value}`).toBe(500);
      expect(await answer.json()).toMatchObject({ code: "internal", meta: { variable: name } });
      expect(() =>
        parseConfig({
          PUBLISH_RATE: "1/s",
          SUBSCRIBE_RATE: "1/s",
          TOKEN_ISSUE_RATE: "1/s",
          READ_RATE: "1/s",
          [name]: value,
        }),
      ).toThrow(ConfigError);
    }
  });
});
