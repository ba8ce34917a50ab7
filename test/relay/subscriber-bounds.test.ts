/**
 * What one subscriber can cost (docs/security.md): a subscriber that talks is closed with 1008 (ping
 * is answered by the runtime); a replay of more than 1 MiB, WebSocket or SSE, is cut off (4008, or the
 * stream ends; a paced one's last summary inside the 1 MiB) and resumes with `?after=` / Last-Event-ID
 * (a live reader that falls behind is thinned first: test/relay/slow-readers.test.ts); readers that
 * keep up get everything, a flush of thousands of frames included.
 */
import { runInDurableObject } from "cloudflare:test";
import { env } from "cloudflare:workers";
import { describe, expect, it } from "vitest";
import { SUBSCRIBER_MAX_BEHIND_BYTES } from "../../src/relay/bounds";
import { SLOW_CONSUMER_CLOSE, SUBSCRIBER_SPOKE_CLOSE } from "../../src/wire/close-codes";
import {
  call,
  channelStats,
  channelObject as channelStub,
  type Frame,
  openSocket,
  publisher,
  publishTo,
  readSse,
  relayObject as relayStub,
  seqOf,
  uniq,
  until,
} from "../support/helpers";
import { readerSocket } from "../support/reader-fixtures";

/** A raw WebSocket subscription that records text frames and its close. */
async function rawSocket(ch: string, query = "") {
  const res = await call(`/v1/subscribe/${ch}${query}`, { headers: { upgrade: "websocket" } });
  const ws = res.webSocket;
  if (res.status !== 101 || !ws) throw new Error(`subscribe failed: ${res.status}`);
  const texts: string[] = [];
  let close: { code: number; reason: string } | null = null;
  ws.addEventListener("message", (ev) => {
    texts.push(ev.data as string);
  });
  ws.addEventListener("close", (ev) => {
    close = { code: ev.code, reason: ev.reason };
  });
  ws.accept();
  return { ws, texts, closed: () => close };
}

/** Big messages straight into the channel's object, `n` per call. */
async function fill(ch: string, count: number, bytes: number): Promise<void> {
  const big = "x".repeat(bytes);
  for (let i = 0; i < count; i += 10) {
    await channelStub(ch).publishMany(
      Array.from({ length: Math.min(10, count - i) }, (_, k) => ({
        channel: ch,
        data: JSON.stringify({ i: i + k, big }),
        publisher: "p",
        action: "deliver" as const,
        now: Date.now(),
      })),
    );
  }
}

describe("subscribers do not talk", () => {
  it("ping is answered pong by the runtime; any other frame, however big, closes that socket with 1008", async () => {
    const ch = `public:bounds.${uniq()}`;
    const t = await publisher("public:bounds.*");
    const pinger = await rawSocket(ch);
    const talker = await rawSocket(ch);
    const giant = await rawSocket(ch);
    const listener = await openSocket(ch);
    pinger.ws.send("ping");
    await until(() => pinger.texts.length === 1, "pong");
    expect(pinger.texts).toEqual(["pong"]);
    // Answered without the object's handler: the runtime's auto-response timestamp is set.
    const autoAnswered = await runInDurableObject(relayStub(ch), (_i, state) =>
      state.getWebSockets().map((ws) => state.getWebSocketAutoResponseTimestamp(ws) !== null),
    );
    expect(autoAnswered.filter(Boolean)).toHaveLength(1);

    talker.ws.send("hello");
    giant.ws.send("x".repeat(1024 * 1024));
    await until(() => talker.closed() !== null && giant.closed() !== null, "the talkers' close");
    expect(talker.closed()).toMatchObject({ code: SUBSCRIBER_SPOKE_CLOSE });
    expect(giant.closed()).toMatchObject({ code: SUBSCRIBER_SPOKE_CLOSE });

    // Nothing was published, the pinger is still open, and everyone else still gets messages.
    expect((await channelStats(ch)).last_seq).toBe(0);
    expect((await publishTo(ch, t, "after")).status).toBe(200);
    expect((await listener.next(1)).map((f) => [f.seq, f.data])).toEqual([[1, "after"]]);
    await until(() => pinger.texts.length === 2, "the pinger's frame");
    expect(pinger.closed()).toBeNull();
    let websockets = 0;
    for (let i = 0; i < 1000 && websockets !== 2; i++) websockets = (await channelStats(ch)).websockets;
    expect(websockets).toBe(2);
    pinger.ws.close();
    listener.ws.close();
  });
});

describe("slow subscribers are bounded in bytes, replays included", () => {
  const total = 100; // HISTORY_LIMIT: all retained
  const size = 30_000; // 3 MB of history, three times the bound

  it("a WebSocket replay sends at most 1 MiB, closes with 4008, and resuming with ?after= brings the rest", async () => {
    const ch = `public:bounds.${uniq()}`;
    await fill(ch, total, size);
    const seqs: number[] = [];
    let after = 0;
    let closes = 0;
    for (let round = 0; round < 10 && seqs.length < total; round++) {
      const sub = await rawSocket(ch, `?after=${after}`);
      if (seqs.length + 0 < total) {
        await until(() => sub.closed() !== null || seqs.length + sub.texts.length === total, "replay");
      }
      const got = sub.texts.map((t) => JSON.parse(t) as Frame);
      const bytes = sub.texts.reduce((a, t) => a + new TextEncoder().encode(t).byteLength, 0);
      expect(bytes).toBeLessThanOrEqual(SUBSCRIBER_MAX_BEHIND_BYTES);
      if (sub.closed()) {
        closes++;
        expect(sub.closed()).toMatchObject({ code: SLOW_CONSUMER_CLOSE });
      } else sub.ws.close();
      seqs.push(...got.map((f) => f.seq));
      after = seqs.at(-1) ?? after;
    }
    expect(seqs).toEqual(Array.from({ length: total }, (_, i) => i + 1));
    expect(closes).toBeGreaterThanOrEqual(2);
    expect((await channelStats(ch)).slow_consumers_closed).toBe(closes);
  });

  it("an SSE replay sends at most 1 MiB and ends; Last-Event-ID brings the rest", async () => {
    const ch = `public:bounds.${uniq()}`;
    await fill(ch, total, size);
    const first = await call(`/v1/subscribe/${ch}?after=0`, { headers: { accept: "text/event-stream" } });
    const head = await readSse(first, total); // returns when the stream ends
    expect(head.length).toBeGreaterThan(0);
    expect(head.length).toBeLessThan(total);
    expect(head.map((e) => seqOf(e.id))).toEqual(Array.from({ length: head.length }, (_, i) => i + 1));
    expect(head.length * size).toBeLessThanOrEqual(SUBSCRIBER_MAX_BEHIND_BYTES);
    const seqs = head.map((e) => seqOf(e.id));
    for (let round = 0; round < 10 && seqs.length < total; round++) {
      const res = await call(`/v1/subscribe/${ch}`, {
        headers: { accept: "text/event-stream", "last-event-id": String(seqs.at(-1)) },
      });
      const events = await readSse(res, total - seqs.length);
      seqs.push(...events.map((e) => seqOf(e.id)));
    }
    expect(seqs).toEqual(Array.from({ length: total }, (_, i) => i + 1));
  });

  it("a replay within a max_rate is bounded the same: a socket that never reads is sent at most 1 MiB, then 4008", async () => {
    // A burst of 1,000/s is every retained message at once (3 MB here): the rate alone bounds nothing.
    const ch = `public:bounds.${uniq()}`;
    await fill(ch, total, size);
    const sub = await readerSocket(ch, "?after=0&max_rate=1000/s", false); // never read until the end
    await until(async () => (await channelStats(ch)).slow_consumers_closed === 1, "the close counted");
    sub.ws.accept();
    await until(() => sub.closed() !== null, "the close");
    expect(sub.closed()).toMatchObject({ code: SLOW_CONSUMER_CLOSE });
    const bytes = sub.raw.reduce((a, f) => a + new TextEncoder().encode(f.text).byteLength, 0);
    expect(bytes).toBeLessThanOrEqual(SUBSCRIBER_MAX_BEHIND_BYTES);
    expect(bytes).toBeGreaterThan(SUBSCRIBER_MAX_BEHIND_BYTES - 2 * size); // what fits is sent
    const seqs = sub.messages.map((m) => m.seq);
    expect(seqs.length).toBeGreaterThan(0);
    expect(seqs).toEqual(Array.from({ length: seqs.length }, (_, i) => i + 1)); // nothing skipped: 1,000/s
    expect(sub.summaries).toEqual([]);
    // Resuming after the last one received brings the next part, bounded the same.
    const next = await readerSocket(ch, `?after=${seqs.at(-1)}&max_rate=1000/s`, false);
    await until(async () => (await channelStats(ch)).slow_consumers_closed === 2, "the second close counted");
    next.ws.accept();
    await until(() => next.closed() !== null, "the second close");
    expect(next.messages[0]?.seq).toBe((seqs.at(-1) ?? 0) + 1);
    expect(next.raw.reduce((a, f) => a + new TextEncoder().encode(f.text).byteLength, 0)).toBeLessThanOrEqual(
      SUBSCRIBER_MAX_BEHIND_BYTES,
    );
  });

  it("an SSE replay within a max_rate is bounded the same: a stream never read holds at most 1 MiB, then ends", async () => {
    const ch = `public:bounds.${uniq()}`;
    await fill(ch, total, size);
    const res = await call(`/v1/subscribe/${ch}?after=0&max_rate=1000/s`, { headers: { accept: "text/event-stream" } });
    expect(res.status).toBe(200); // its body is not read until the stream has ended
    await until(async () => (await channelStats(ch)).slow_consumers_closed === 1, "the end counted");
    const text = await res.text();
    expect(new TextEncoder().encode(text).byteLength).toBeLessThanOrEqual(SUBSCRIBER_MAX_BEHIND_BYTES);
    const ids = [...text.matchAll(/^id: (.*)$/gm)].map((m) => seqOf(m[1] ?? ""));
    expect(ids.length).toBeGreaterThan(0);
    expect(ids).toEqual(Array.from({ length: ids.length }, (_, i) => i + 1));
  });
});

describe("a paced replay's last summary is inside the bound", () => {
  /**
   * A channel whose subscriber summaries name keys (THROTTLE_SUMMARY `/emoji` on `public:summary.**`),
   * filled to HISTORY_LIMIT: one message, 20 under keys of 128 characters (a 1/s burst has no room for
   * them: skipped, a summary of some 2.8 KB), then priority messages, which always pass — 34 of 30 KB
   * and 45 of 1 KB — until one would not fit in 1 MiB. The step at the end is a fraction of the summary.
   */
  async function fillKeyed(ch: string): Promise<void> {
    const message = (data: unknown, priority = false) => ({
      channel: ch,
      data: JSON.stringify(data),
      publisher: "p",
      action: "deliver" as const,
      now: Date.now(),
      priority,
    });
    const all = [
      message({ emoji: "first" }),
      ...Array.from({ length: 20 }, (_, i) => message({ emoji: `${i}`.padStart(128, "k") })),
      ...Array.from({ length: 34 }, (_, i) => message({ i, big: "x".repeat(30_000) }, true)),
      ...Array.from({ length: 45 }, (_, i) => message({ i, small: "y".repeat(1_000) }, true)),
    ];
    for (let i = 0; i < all.length; i += 10) await channelStub(ch).publishMany(all.slice(i, i + 10));
  }
  const bytesOf = (text: string) => new TextEncoder().encode(text).byteLength;

  it("a WebSocket that never reads is sent at most 1 MiB, its last summary included, then 4008", async () => {
    const ch = `public:summary.bounds.${uniq()}`;
    await fillKeyed(ch);
    const sub = await readerSocket(ch, "?after=0&max_rate=1/s", false);
    await until(async () => (await channelStats(ch)).slow_consumers_closed === 1, "the close counted");
    sub.ws.accept();
    await until(() => sub.closed() !== null, "the close");
    expect(sub.closed()).toMatchObject({ code: SLOW_CONSUMER_CLOSE });
    expect(sub.summaries).toHaveLength(1);
    expect(sub.summaries[0]).toMatchObject({ skipped: 20 });
    expect(Object.keys(sub.summaries[0]?.by_key ?? {})).toHaveLength(20);
    expect(JSON.parse(sub.raw.at(-1)?.text ?? "{}")).toMatchObject({ type: "summary", scope: "subscriber" });
    const seqs = sub.messages.map((m) => m.seq);
    expect(seqs.slice(0, 2)).toEqual([1, 22]);
    expect(seqs.at(-1)).toBeLessThan(100); // stopped at the bound
    expect(sub.raw.reduce((a, f) => a + bytesOf(f.text), 0)).toBeLessThanOrEqual(SUBSCRIBER_MAX_BEHIND_BYTES);
  });

  it("an SSE stream never read holds at most 1 MiB, its last summary included, then ends", async () => {
    const ch = `public:summary.bounds.${uniq()}`;
    await fillKeyed(ch);
    const res = await call(`/v1/subscribe/${ch}?after=0&max_rate=1/s`, { headers: { accept: "text/event-stream" } });
    expect(res.status).toBe(200); // its body is not read until the stream has ended
    await until(async () => (await channelStats(ch)).slow_consumers_closed === 1, "the end counted");
    const text = await res.text();
    const last = text.slice(text.lastIndexOf("event: "));
    expect(last).toMatch(/^event: summary\ndata: \{"type":"summary","scope":"subscriber".*"skipped":20,"by_key"/);
    // What the replay and its summary wrote, past the stream's greeting.
    const greeting = ": subscribed\nretry: 1000\n\n";
    expect(text.startsWith(greeting)).toBe(true);
    expect(bytesOf(text) - bytesOf(greeting)).toBeLessThanOrEqual(SUBSCRIBER_MAX_BEHIND_BYTES);
  });
});

// A live reader that stops reading (WebSocket or SSE) is thinned before it is closed, and resumes
// with ?after=: test/relay/slow-readers.test.ts.

describe("SSE under a busy channel", () => {
  it("a flush of thousands of frames reaches every reading SSE subscriber whole", async () => {
    // One flush used to be one stream chunk per frame: a big batch (a busy channel, a long replay)
    // filled the queue before the reader could take a chunk, and cut off a reader that was keeping
    // up. Now a flush is one chunk, shared by all SSE readers.
    const ch = `public:hostile.${uniq()}`;
    const readers = await Promise.all(
      [1, 2].map(() => call(`/v1/subscribe/${ch}`, { headers: { accept: "text/event-stream" } })),
    );
    for (const res of readers) expect(res.status).toBe(200);
    const total = 1500;
    const stub = env.CHANNEL.get(env.CHANNEL.idFromName(ch));
    await stub.publishMany(
      Array.from({ length: total }, (_, i) => ({
        channel: ch,
        data: `{"i":${i}}`,
        publisher: "p",
        action: "deliver" as const,
        now: Date.now(),
      })),
    );
    const stats = await channelStats(ch);
    expect(stats).toMatchObject({ sse: 2, slow_consumers_closed: 0 });
    for (const res of readers) {
      const events = await readSse(res, total);
      expect(events.map((e) => (e.data.data as { i: number }).i)).toEqual(Array.from({ length: total }, (_, i) => i));
      expect(events.map((e) => seqOf(e.id))).toEqual(Array.from({ length: total }, (_, i) => i + 1));
    }
  });
});
