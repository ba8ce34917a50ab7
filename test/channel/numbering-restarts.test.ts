/**
 * Numbering restarts are visible (docs/api.md, "Numbering restarts"): a channel whose storage idle
 * expiry deleted numbers from seq 1 again under a new `epoch`; publish answers, message frames, SSE
 * event ids and history entries carry it; a resume from a gone epoch replays everything kept from seq
 * 1 (history, WebSocket, SSE `Last-Event-ID: <E>:<N>`, the TypeScript client), and `after` beyond the
 * head in the current numbering answers 400 — a resume never silently skips the new messages. The
 * wipe is the channel's own alarm, run after its last publish is moved back in storage.
 */
import { exports } from "cloudflare:workers";
import { FloodgateClient, type Message } from "@floodgate/client";
import { describe, expect, it } from "vitest";
import { wipeIdleChannel } from "../support/channel-internals";
import {
  BASE,
  call,
  channelObject,
  freshIp,
  openSocket,
  publisher,
  publishTo,
  readSse,
  uniq,
  until,
  workerSocket,
} from "../support/helpers";

const EPOCH = /^[A-Za-z0-9_-]{1,64}$/;

type Delivered = { status: string; epoch: string; seq: number };
type Page = { messages: { epoch: string; seq: number; data: unknown }[] };

async function publish(ch: string, token: string, data: unknown): Promise<Delivered> {
  const res = await publishTo(ch, token, data);
  expect(res.status).toBe(200);
  return (await res.json()) as Delivered;
}

const history = (ch: string, query: string) =>
  call(`/v1/history/${ch}${query}`, { headers: { "cf-connecting-ip": freshIp() } });

/** A channel with messages 1..3 under one epoch, wiped, then 1..2 under the next. */
async function restarted() {
  const ch = `public:epoch.${uniq()}`;
  const t = await publisher("public:epoch.*");
  const before = [await publish(ch, t, "a"), await publish(ch, t, "b"), await publish(ch, t, "c")];
  const old = before[0]?.epoch as string;
  expect(old).toMatch(EPOCH);
  expect(before.map((d) => [d.epoch, d.seq])).toEqual([
    [old, 1],
    [old, 2],
    [old, 3],
  ]);
  // Straight from the object: the Worker's shared history answers may be up to 1 s old.
  const page = (await channelObject(ch).history(0, 10)).map((f) => JSON.parse(f) as { epoch: string; seq: number });
  expect(page.map((m) => [m.epoch, m.seq])).toEqual(before.map((d) => [d.epoch, d.seq]));
  await wipeIdleChannel(ch);
  const after = [await publish(ch, t, "d"), await publish(ch, t, "e")];
  const current = after[0]?.epoch as string;
  expect(current).toMatch(EPOCH);
  expect(current).not.toBe(old);
  expect(after.map((d) => [d.epoch, d.seq])).toEqual([
    [current, 1],
    [current, 2],
  ]);
  return { ch, t, old, current };
}

describe("numbering restarts are visible", () => {
  it("history: a gone epoch (or none, past the head) reads from seq 1; after beyond the head in the current epoch answers 400", async () => {
    const { ch, old, current } = await restarted();
    const stale = (await (await history(ch, `?epoch=${old}&after=3`)).json()) as Page;
    expect(stale.messages.map((m) => [m.epoch, m.seq, m.data])).toEqual([
      [current, 1, "d"],
      [current, 2, "e"],
    ]);
    const all = (await (await history(ch, "?after=0")).json()) as Page;
    expect(all.messages.map((m) => [m.epoch, m.seq])).toEqual([
      [current, 1],
      [current, 2],
    ]);
    const same = (await (await history(ch, `?epoch=${current}&after=1`)).json()) as Page;
    expect(same.messages.map((m) => m.seq)).toEqual([2]);
    const res = await history(ch, `?epoch=${current}&after=3`);
    expect(res.status).toBe(400);
    expect(((await res.json()) as { msg: string }).msg).toContain("beyond the channel's last seq 2");
    // With no epoch named, an after past the head can only be the old numbering's: read from seq 1.
    const unnamed = (await (await history(ch, "?after=3")).json()) as Page;
    expect(unnamed.messages.map((m) => [m.epoch, m.seq])).toEqual([
      [current, 1],
      [current, 2],
    ]);
    expect((await history(ch, "?epoch=no%20good&after=1")).status).toBe(400);
    expect((await history(ch, `?epoch=${"x".repeat(65)}&after=1`)).status).toBe(400);
  });

  it("WebSocket and SSE: a resume from a gone epoch replays from seq 1 then continues live; beyond the head is refused before upgrade", async () => {
    const { ch, t, old, current } = await restarted();
    const ws = await openSocket(ch, `?epoch=${old}&after=3`);
    await ws.next(2);
    await publish(ch, t, "f");
    const frames = await ws.next(3);
    expect(frames.map((f) => [f.epoch, f.seq, f.data])).toEqual([
      [current, 1, "d"],
      [current, 2, "e"],
      [current, 3, "f"],
    ]);
    ws.ws.close();
    const sse = await call(`/v1/subscribe/${ch}`, {
      headers: { accept: "text/event-stream", "last-event-id": `${old}:3`, "cf-connecting-ip": freshIp() },
    });
    expect(sse.status).toBe(200);
    expect((await readSse(sse, 3)).map((e) => e.id)).toEqual([`${current}:1`, `${current}:2`, `${current}:3`]);
    // The current epoch with an after past the head: 400, no upgrade.
    const refused = await call(`/v1/subscribe/${ch}?epoch=${current}&after=9`, {
      headers: { upgrade: "websocket", "cf-connecting-ip": freshIp() },
    });
    expect(refused.status).toBe(400);
    expect(refused.webSocket).toBeNull();
    // An after past the head with no epoch (a client that keeps only seqs): everything kept, from seq 1.
    const unnamed = await openSocket(ch, "?after=9");
    expect((await unnamed.next(3)).map((f) => f.seq)).toEqual([1, 2, 3]);
    unnamed.ws.close();
    const beyond = await call(`/v1/subscribe/${ch}`, {
      headers: { accept: "text/event-stream", "last-event-id": `${current}:9`, "cf-connecting-ip": freshIp() },
    });
    expect(beyond.status).toBe(400);
    // The same epoch and a seq within the head resumes as always.
    const same = await openSocket(ch, `?epoch=${current}&after=2`);
    expect((await same.next(1)).map((f) => f.seq)).toEqual([3]);
    same.ws.close();
  });

  it("the TypeScript client resumes with its epoch: after a restart it gets the new numbering from seq 1", async () => {
    const { ch, t, old, current } = await restarted();
    const fg = new FloodgateClient({
      baseUrl: BASE,
      fetch: (i, init) =>
        exports.default.fetch(
          new Request(i, { ...init, headers: { ...init?.headers, "cf-connecting-ip": freshIp() } }),
        ),
      openWebSocket: workerSocket,
    });
    const got: Message[] = [];
    const sub = fg.subscribe(ch, (m) => got.push(m), { after: 3, epoch: old });
    await until(() => got.length === 2, "the replay from seq 1");
    await publish(ch, t, "f");
    await until(() => got.length === 3, "the live message");
    expect(got.map((m) => [m.epoch, m.seq, m.data])).toEqual([
      [current, 1, "d"],
      [current, 2, "e"],
      [current, 3, "f"],
    ]);
    expect([sub.epoch, sub.lastSeq]).toEqual([current, 3]);
    sub.close();
  });
});
