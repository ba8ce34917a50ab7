/**
 * How long a subscription lasts, the relay's side (docs/api.md, "Subscribing"; docs/security.md): one
 * opened with a token ends at the token's `exp` (WebSocket 4001, SSE `event: expired`; its WebSocket
 * is held without hibernation, so that close completes over a real connection, which only
 * `npm run test:connections` can show), its last frame saying the seq it stands at (so a quiet
 * subscriber resumes without a loss); SSE streams get a comment line on the relay's alarm; a
 * subscriber gone stops counting within the bound even when the report of its leaving is lost
 * (inside workerd an aborted stream's cancel reaches the relay at once; over a network only a write
 * finds it, which is the heartbeat's other job); the relay's memory for waiting bytes is bounded, the
 * most-behind closed first. Time is the relay's own `now` (its `tick`); nothing sleeps.
 */
import { runInDurableObject } from "cloudflare:test";
import { describe, expect, it } from "vitest";
import { ChannelObject } from "../../src/channel/channel-object";
import { REPORT_RETRY_MS, SSE_ANONYMOUS_MAX_MS, SSE_HEARTBEAT_MS } from "../../src/relay/bounds";
import { STREAM_LIFETIME_REASON, TOKEN_EXPIRED_CLOSE, TOKEN_EXPIRED_REASON } from "../../src/wire/close-codes";
import {
  call,
  channelStats,
  channelObject as channelStub,
  mint,
  openSocket,
  readSse,
  relayObject as relayStub,
  seqOf,
  uniq,
  until,
  untilUnsubscribed,
  withFailing,
} from "../support/helpers";
import { socket, sseText } from "../support/relay-fixtures";

async function subscriber(): Promise<{ token: string; exp: number }> {
  const pair = await mint({ sub: uniq("life"), channels: ["public:life.*"] });
  return { token: pair.access_token, exp: pair.expires_at * 1000 };
}

/** Publishes `n` messages straight to the channel object (no rate limits in the way). */
async function publish(ch: string, n: number): Promise<void> {
  for (let i = 0; i < n; i++) {
    await channelStub(ch).publishMany([
      { channel: ch, data: JSON.stringify({ i }), publisher: "p", action: "deliver", now: Date.now() },
    ]);
  }
}

/** The relay's last seq once it has caught up with the channel's head. */
const relayAt = (ch: string, seq: number) =>
  until(() => runInDurableObject(relayStub(ch), (relay) => relay.counts().last_seq === seq), `the relay at seq ${seq}`);

/** The expired frame at `seq`, in the channel's numbering (docs/api.md, "Numbering restarts"). */
const expiredAt = (seq: number) => ({
  type: "expired",
  reason: TOKEN_EXPIRED_REASON,
  epoch: expect.stringMatching(/^[A-Za-z0-9_-]{12}$/),
  seq,
});

/** Runs the relay's alarm work as if it were `now`. */
const tickAt = (ch: string, now: number) => runInDurableObject(relayStub(ch), (relay) => relay.tick(now));

describe("a subscription ends with its token", () => {
  it("a WebSocket is closed with 4001 `token expired` at exp, by the relay's alarm set for it; an anonymous one stays", async () => {
    const ch = `public:life.${uniq()}`;
    const { token, exp } = await subscriber();
    const anon = await socket(ch);
    const signed = await socket(ch, token);
    // Due by exp (sooner when the list of revoked sessions is read, or the connection ledgers renewed, first).
    const alarm = await runInDurableObject(relayStub(ch), (_r, state) => state.storage.getAlarm());
    expect(alarm).not.toBeNull();
    expect(alarm as number).toBeLessThanOrEqual(exp);
    await tickAt(ch, exp - 1);
    expect(signed.closed()).toBeNull();
    await tickAt(ch, exp);
    await until(() => signed.closed() !== null, "the expired socket's close");
    expect(signed.closed()).toEqual({ code: TOKEN_EXPIRED_CLOSE, reason: TOKEN_EXPIRED_REASON });
    expect(anon.closed()).toBeNull();
    await until(async () => (await channelStats(ch)).websockets === 1, "the count without the expired socket");
    anon.ws.close();
  });

  it("a WebSocket with a token is held without hibernation so its close completes from the alarm; it answers ping, and closes like a hibernatable one", async () => {
    const ch = `public:life.${uniq()}`;
    const { token, exp } = await subscriber();
    const anon = await socket(ch);
    const signed = await socket(ch, token);
    const spoke = await socket(ch, (await subscriber()).token);
    const left = await socket(ch, (await subscriber()).token);
    await until(async () => (await channelStats(ch)).websockets === 4, "four sockets counted");
    // Only the anonymous one is the runtime's (hibernatable); the others are the relay's own.
    const held = await runInDurableObject(relayStub(ch), (r, state) => ({
      hibernatable: state.getWebSockets().length,
      all: r.counts().websockets,
    }));
    expect(held).toEqual({ hibernatable: 1, all: 4 });
    // `ping` is answered as the runtime answers a hibernatable socket's.
    const pongs = signed.frames.length;
    signed.ws.send("ping");
    await until(() => signed.raw.length > 0 && signed.raw.at(-1) === "pong", "pong");
    expect(signed.frames).toHaveLength(pongs);
    // Anything else closes it with 1008, as a hibernatable socket's webSocketMessage does.
    spoke.ws.send("hello");
    await until(() => spoke.closed() !== null, "the talking socket's close");
    expect(spoke.closed()?.code).toBe(1008);
    // One that goes away stops counting.
    left.ws.close(1000, "bye");
    await until(async () => (await channelStats(ch)).websockets === 2, "the count without the two");
    await tickAt(ch, exp);
    await until(() => signed.closed() !== null, "the expired socket's close");
    expect(signed.closed()).toEqual({ code: TOKEN_EXPIRED_CLOSE, reason: TOKEN_EXPIRED_REASON });
    expect(anon.closed()).toBeNull();
    anon.ws.close();
  });

  it("an SSE stream gets `event: expired` at exp and ends; an anonymous one goes on", async () => {
    const ch = `public:life.${uniq()}`;
    const { token, exp } = await subscriber();
    const signed = await sseText(ch, token);
    const anon = await sseText(ch);
    await until(async () => (await channelStats(ch)).sse === 2, "both streams counted");
    await tickAt(ch, exp - 1);
    expect(signed.state.text).not.toContain("event: expired");
    await tickAt(ch, exp);
    await until(() => signed.state.ended, "the expired stream's end");
    expect(signed.state.text).toMatch(/event: expired\ndata: \{[^\n]*"type":"expired"[^\n]*\}\n\n$/);
    expect(anon.state.ended).toBe(false);
    expect(anon.state.text).not.toContain("expired");
    await until(async () => (await channelStats(ch)).sse === 1, "the count without the expired stream");
    await anon.cancel();
  });
});

describe("an anonymous SSE stream has a longest lifetime", () => {
  it("ends after 24 h with `event: expired` at its position; Last-Event-ID resumes it without a loss; anonymous WebSockets stay", async () => {
    const ch = `public:life.${uniq()}`;
    const opened = Date.now();
    const stream = await sseText(ch);
    const socketAnon = await socket(ch);
    await until(async () => (await channelStats(ch)).sse === 1, "the stream counted");
    await publish(ch, 2);
    await until(() => /id: [A-Za-z0-9_-]+:2\n/.test(stream.state.text), "seq 2 on the stream");
    // Its end is on the relay's alarm: due by then.
    const alarm = await runInDurableObject(relayStub(ch), (_r, state) => state.storage.getAlarm());
    expect(alarm as number).toBeLessThanOrEqual(opened + SSE_ANONYMOUS_MAX_MS + 1_000);
    await tickAt(ch, opened + SSE_ANONYMOUS_MAX_MS - 60_000);
    expect(stream.state.text).not.toContain("event: expired");
    await tickAt(ch, Date.now() + SSE_ANONYMOUS_MAX_MS);
    await until(() => stream.state.ended, "the stream's end");
    const last = /id: ([A-Za-z0-9_-]+):(\d+)\nevent: expired\ndata: ([^\n]*)\n\n$/.exec(stream.state.text);
    expect(last?.[2]).toBe("2");
    const epoch = last?.[1];
    expect(JSON.parse(last?.[3] ?? "null")).toEqual({ type: "expired", reason: STREAM_LIFETIME_REASON, epoch, seq: 2 });
    expect(socketAnon.closed()).toBeNull();
    // What an EventSource does next: reconnect with the last id it saw.
    await publish(ch, 1);
    const res = await call(`/v1/subscribe/${ch}`, {
      headers: { accept: "text/event-stream", "last-event-id": `${epoch}:2` },
    });
    const resumed = await readSse(res, 1);
    expect(resumed.map((e) => e.id)).toEqual([`${epoch}:3`]);
    socketAnon.ws.close();
  });
});

describe("the expired frame says where the subscriber stands", () => {
  it("a WebSocket on a quiet channel is sent `expired` with its resume floor (the head it joined at), then 4001", async () => {
    const ch = `public:life.${uniq()}`;
    await publish(ch, 3);
    const { token, exp } = await subscriber();
    const quiet = await socket(ch, token);
    await until(async () => (await channelStats(ch)).websockets === 1, "the socket counted");
    await tickAt(ch, exp);
    await until(() => quiet.closed() !== null, "the expired socket's close");
    // Nothing since it connected: the seq is the head it joined at, so `?after=3` misses nothing.
    expect(quiet.frames).toEqual([expiredAt(3)]);
    expect(quiet.closed()).toMatchObject({ code: TOKEN_EXPIRED_CLOSE });
  });

  it("a WebSocket that resumed and was sent messages is at the last seq it was sent", async () => {
    const ch = `public:life.${uniq()}`;
    await publish(ch, 2);
    const { token, exp } = await subscriber();
    const resumed = await socket(ch, token, "?after=1");
    await until(() => resumed.frames.length === 1, "the replay of seq 2");
    await publish(ch, 2);
    await until(() => resumed.frames.length === 3, "the live seqs 3 and 4");
    await tickAt(ch, exp);
    await until(() => resumed.closed() !== null, "the expired socket's close");
    expect(resumed.frames.map((f) => (f as { seq: number }).seq)).toEqual([2, 3, 4, 4]);
    expect(resumed.frames.at(-1)).toEqual(expiredAt(4));
  });

  it("a packed socket (`?batch=1`) gets it in an array, after what FRAME_DELAY still held for it", async () => {
    const ch = `public:life.${uniq()}`;
    await publish(ch, 2);
    const { token, exp } = await subscriber();
    const packed = await socket(ch, token, "?batch=1");
    await until(async () => (await channelStats(ch)).websockets === 1, "the socket counted");
    await runInDurableObject(relayStub(ch), (relay) => {
      relay.frameDelayMs = 3_600_000; // held until something else sends it
    });
    await publish(ch, 1);
    await relayAt(ch, 3);
    expect(packed.frames).toEqual([]); // seq 3 is held
    await tickAt(ch, exp);
    await until(() => packed.closed() !== null, "the expired socket's close");
    expect(packed.frames).toHaveLength(2);
    expect((packed.frames[0] as { seq: number }[]).map((f) => f.seq)).toEqual([3]);
    expect(packed.frames[1]).toEqual([expiredAt(3)]);
  });

  it("an SSE stream on a quiet channel ends with `event: expired` carrying its resume floor as seq and id", async () => {
    const ch = `public:life.${uniq()}`;
    await publish(ch, 2);
    const { token, exp } = await subscriber();
    const quiet = await sseText(ch, token);
    await until(async () => (await channelStats(ch)).sse === 1, "the stream counted");
    await tickAt(ch, exp);
    await until(() => quiet.state.ended, "the expired stream's end");
    const last = /id: ([A-Za-z0-9_-]+):(\d+)\nevent: expired\ndata: ([^\n]*)\n\n$/.exec(quiet.state.text);
    expect(last?.[2]).toBe("2");
    const frame = JSON.parse(last?.[3] ?? "null") as { epoch: string };
    expect(frame).toEqual(expiredAt(2));
    expect(last?.[1]).toBe(frame.epoch);
    expect(quiet.state.text).not.toContain("event: message");
  });
});

describe("a subscriber that went away is gone", () => {
  it("an SSE stream gets a comment line on the relay's alarm, due within 15 s", async () => {
    const ch = `public:life.${uniq()}`;
    const opened = Date.now();
    const stream = await sseText(ch);
    await until(() => stream.state.text.includes(": subscribed"), "the greeting");
    const alarm = await runInDurableObject(relayStub(ch), (_r, state) => state.storage.getAlarm());
    expect(alarm).not.toBeNull();
    expect(alarm as number).toBeLessThanOrEqual(Date.now() + 15_000);
    expect(stream.state.text).not.toContain(": keepalive");
    await tickAt(ch, opened + SSE_HEARTBEAT_MS + 1_000);
    await until(() => stream.state.text.includes(": keepalive\n\n"), "the heartbeat");
    // And the next one is asked for.
    expect(await runInDurableObject(relayStub(ch), (_r, state) => state.storage.getAlarm())).not.toBeNull();
    await stream.cancel();
  });

  it("aborted SSE streams stop counting within the bound, with no message flowing, even when their report is lost", async () => {
    const ch = `public:life.${uniq()}`;
    const streams = await Promise.all([sseText(ch), sseText(ch), sseText(ch)]);
    const keeper = await sseText(ch);
    await until(async () => (await channelStats(ch)).sse === 4, "four streams counted");
    const stub = relayStub(ch);
    // The channel does not get the report of their leaving: it still counts four.
    await withFailing(ChannelObject, "relayReport", "channel unavailable", async () => {
      for (const s of streams) await s.cancel();
      await until(
        () =>
          runInDurableObject(
            stub,
            (relay) =>
              relay.counts().sse === 1 &&
              (relay as unknown as { reporter: { reporting: unknown } }).reporter.reporting === null,
          ),
        "the relay's failed report",
      );
    });
    expect((await channelStats(ch)).sse).toBe(4);
    // The relay's alarm is due again before the next heartbeat, and tells the channel then.
    const alarm = await runInDurableObject(stub, (_r, state) => state.storage.getAlarm());
    expect(alarm as number).toBeLessThanOrEqual(Date.now() + REPORT_RETRY_MS);
    await tickAt(ch, Date.now() + REPORT_RETRY_MS);
    await until(async () => (await channelStats(ch)).sse === 1, "only the open stream counted");
    expect(keeper.state.ended).toBe(false);
    await keeper.cancel();
  });
});

describe("one relay's memory is bounded", () => {
  it("past the relay's cap the subscriber most behind is cut off first (counted as slow); the others go on", async () => {
    const ch = `public:life.${uniq()}`;
    const big = "x".repeat(100_000);
    const publish = async (n: number) => {
      for (let i = 0; i < n; i++) {
        await channelStub(ch).publishMany([
          { channel: ch, data: JSON.stringify({ big }), publisher: "p", action: "deliver", now: Date.now() },
        ]);
      }
    };
    const reading = await openSocket(ch);
    // Two streams never read until the end: what is sent them waits in the relay.
    const sseHeaders = { headers: { accept: "text/event-stream" } };
    const behind = await call(`/v1/subscribe/${ch}`, sseHeaders);
    await publish(4); // ~400 KB waiting for the first
    const lessBehind = await call(`/v1/subscribe/${ch}`, sseHeaders);
    await until(async () => (await channelStats(ch)).sse === 2, "both streams counted");
    await runInDurableObject(relayStub(ch), (relay) => {
      relay.maxBufferedBytes = 600_000;
    });
    // ~600 KB and ~200 KB: over the cap together, under it without the first (each far under 1 MiB).
    await publish(2);
    await reading.next(6);
    await until(async () => (await channelStats(ch)).sse === 1, "the most-behind stream cut off");
    expect(await channelStats(ch)).toMatchObject({ websockets: 1, slow_consumers_closed: 1 });
    await publish(1);
    await reading.next(7);
    // The one less behind was kept and gets everything after its start; the first ended early.
    expect((await readSse(lessBehind, 3)).map((e) => seqOf(e.id))).toEqual([5, 6, 7]);
    const cut = await readSse(behind, 7);
    expect(cut.length).toBeLessThan(6);
    expect(cut.map((e) => seqOf(e.id))).toEqual(Array.from({ length: cut.length }, (_, i) => i + 1));
    reading.ws.close();
    await untilUnsubscribed(ch);
  });
});
