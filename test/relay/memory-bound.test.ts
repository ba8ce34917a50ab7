/**
 * One relay's memory bound (src/relay/memory.ts): on its own, the most-behind subscribers are closed
 * until the rest fit, from the backlogs the sending pass read or, without them, read anew; on real
 * sockets in workerd, a thinned subscriber it closes (4008; an SSE stream cut off) gets its last
 * summary first, as every slow close does, and the close is counted as slow.
 */
import { runInDurableObject } from "cloudflare:test";
import { readSse } from "@floodgate/client";
import { describe, expect, it } from "vitest";
import { boundMemory, type SlowCloser, SocketBacklog } from "../../src/relay/memory";
import type { RelaySubscribers } from "../../src/relay/subscribers";
import { RELAY_MEMORY_REASON, SLOW_CONSUMER_CLOSE } from "../../src/wire/close-codes";
import {
  call,
  channelObject,
  channelStats,
  grown,
  relayObject,
  scrapeMetrics,
  seqOf,
  uniq,
  until,
  untilUnsubscribed,
} from "../support/helpers";
import { accounted, publishDirect, readerSocket, relayClock } from "../support/reader-fixtures";

function relayOf(waiting: number[], sse: number[] = []) {
  const sockets = waiting.map(
    (bufferedAmount, i) => ({ bufferedAmount, readyState: 1, name: `ws${i}`, send: () => {} }) as unknown as WebSocket,
  );
  const streams = sse.map((bytes, i) => ({ bytes, name: `sse${i}` }));
  const closed: string[] = [];
  const reasons = new Set<string>();
  let reads = 0;
  const subs = {
    sockets: () => {
      reads++;
      return sockets;
    },
    hub: { all: streams, backlog: (c: { bytes: number }) => c.bytes },
  } as unknown as RelaySubscribers;
  const closer: SlowCloser = {
    closeSlow: (sub, reason) => {
      closed.push((sub as unknown as { name: string }).name);
      reasons.add(reason);
      if ("send" in sub) (sub as { readyState: number }).readyState = 3; // CLOSED
    },
  };
  return { subs, closer, sockets, closed, reasons, reads: () => reads };
}

describe("a relay's memory bound", () => {
  it("closes the most behind first as slow, WebSocket or SSE, until the rest fit", () => {
    const relay = relayOf([100, 700, 50], [400]);
    boundMemory(relay.subs, 600, relay.closer);
    expect(relay.closed).toEqual(["ws1"]); // 1,250 → 550
    expect([...relay.reasons]).toEqual([RELAY_MEMORY_REASON]);
    // A socket already closing still counts until it is gone, and is not closed again.
    boundMemory(relay.subs, 100, relay.closer);
    expect(relay.closed).toEqual(["ws1", "sse0", "ws0"]); // 1,250 → 550 → 150 → 50
  });

  it("takes the sending pass's backlogs instead of reading every socket again", () => {
    const relay = relayOf([0, 0, 0]);
    const backlog = new SocketBacklog();
    // What the pass read right after its sends: the second socket is far behind.
    backlog.add(relay.sockets[0] as WebSocket, 10);
    backlog.add(relay.sockets[1] as WebSocket, 900);
    backlog.add(relay.sockets[2] as WebSocket, 0);
    boundMemory(relay.subs, 500, relay.closer, backlog);
    expect(relay.reads()).toBe(0);
    expect(relay.closed).toEqual(["ws1"]);
    // Under the bound: nobody closed.
    const under = new SocketBacklog();
    under.add(relay.sockets[0] as WebSocket, 400);
    boundMemory(relay.subs, 500, relay.closer, under);
    expect(relay.closed).toEqual(["ws1"]);
  });
});

describe("a relay's memory bound, on real sockets", () => {
  const big = "x".repeat(30_000);
  const slowCloses = 'floodgate_subscriptions_closed_total{reason="slow"}';

  /**
   * Ten 30 KB messages fit a 10/s burst (the relay's clock stands still) and wait unread for the
   * thinned subscriber; `skipped` more are skipped for it. Then the relay's cap drops under what
   * waits, and one more message (skipped too) sets off the bound after its pass. `reading` reads.
   */
  async function overTheCap(ch: string, reading: { messages: unknown[] }, skipped: number): Promise<number> {
    let n = 0;
    for (; n < 10 + skipped; n++) {
      await publishDirect(ch, { n, big });
      await until(() => reading.messages.length === n + 1, `message ${n + 1}`);
    }
    await runInDurableObject(relayObject(ch), (relay) => {
      relay.maxBufferedBytes = 150_000; // ~300 KB wait for the thinned one, at most one frame for the reader
    });
    await publishDirect(ch, { n: ++n, big });
    await until(async () => (await channelStats(ch)).slow_consumers_closed === 1, "the close counted");
    return n;
  }

  it("a thinned WebSocket it closes gets its last summary first, then 4008; counted as slow once", async () => {
    const ch = `public:memory.${uniq()}`;
    await relayClock(ch);
    const thinned = await readerSocket(ch, "?max_rate=10/s", false); // never read until the end
    const reading = await readerSocket(ch);
    const before = await scrapeMetrics();
    const n = await overTheCap(ch, reading, 3);
    thinned.ws.accept();
    await until(() => thinned.closed() !== null, "the close");
    expect(thinned.closed()).toEqual({ code: SLOW_CONSUMER_CLOSE, reason: RELAY_MEMORY_REASON });
    expect(thinned.messages.map((m) => m.seq)).toEqual([1, 2, 3, 4, 5, 6, 7, 8, 9, 10]);
    // Its last frame is its summary: every message it was offered is received or counted.
    expect(thinned.summaries).toHaveLength(1);
    expect(thinned.summaries[0]).toMatchObject({ type: "summary", scope: "subscriber", channel: ch, skipped: 4 });
    expect(JSON.parse(thinned.raw.at(-1)?.text ?? "{}")).toMatchObject({ type: "summary", scope: "subscriber" });
    expect(accounted(thinned)).toBe(n);
    await until(async () => (grown(before, await scrapeMetrics())[slowCloses] ?? 0) >= 1, "the close in /metrics");
    expect(grown(before, await scrapeMetrics())[slowCloses]).toBe(1);
    expect(await channelStats(ch)).toMatchObject({ websockets: 1, slow_consumers_closed: 1 });
    reading.ws.close();
    await untilUnsubscribed(ch);
  });

  it("a thinned SSE stream it cuts off ends with its last summary, its backlog discarded; counted as slow once", async () => {
    const ch = `public:memory.${uniq()}`;
    await relayClock(ch);
    const res = await call(`/v1/subscribe/${ch}?max_rate=10/s`, { headers: { accept: "text/event-stream" } });
    expect(res.status).toBe(200); // its body is not read until the end
    const reading = await readerSocket(ch);
    const before = await scrapeMetrics();
    await overTheCap(ch, reading, 3);
    const kept: number[] = [];
    const events: { event: string; data: string }[] = [];
    await readSse(res.body as ReadableStream<Uint8Array>, (e) => {
      events.push({ event: e.event ?? "message", data: e.data });
      if (e.event === "message") kept.push(seqOf(e.id));
    });
    expect(kept).toEqual(Array.from({ length: kept.length }, (_, i) => i + 1));
    expect(kept.length).toBeLessThan(10); // what still waited was discarded
    expect(events.at(-1)?.event).toBe("summary");
    expect(JSON.parse(events.at(-1)?.data ?? "{}")).toMatchObject({
      type: "summary",
      scope: "subscriber",
      channel: ch,
      skipped: 4,
    });
    await until(async () => (grown(before, await scrapeMetrics())[slowCloses] ?? 0) >= 1, "the close in /metrics");
    expect(grown(before, await scrapeMetrics())[slowCloses]).toBe(1);
    expect(await channelStats(ch)).toMatchObject({ sse: 0, websockets: 1, slow_consumers_closed: 1 });
    reading.ws.close();
    await untilUnsubscribed(ch);
  });

  it("a subscriber it closes while its replay is cut short is closed and counted once", async () => {
    const ch = `public:memory.${uniq()}`;
    for (let i = 0; i < 100; i += 10) {
      await channelObject(ch).publishMany(
        Array.from({ length: 10 }, (_, k) => ({
          channel: ch,
          data: JSON.stringify({ i: i + k, big }),
          publisher: "p",
          action: "deliver" as const,
          now: Date.now(),
        })),
      );
    }
    await runInDurableObject(relayObject(ch), (relay) => {
      relay.maxBufferedBytes = 500_000;
    });
    const before = await scrapeMetrics();
    // A replay of 3 MB: 1 MiB of it waits unread, over the relay's cap, and more remains.
    const sub = await readerSocket(ch, "?after=0", false);
    await until(async () => (await channelStats(ch)).slow_consumers_closed > 0, "the close counted");
    sub.ws.accept();
    await until(() => sub.closed() !== null, "the close");
    expect(sub.closed()).toEqual({ code: SLOW_CONSUMER_CLOSE, reason: RELAY_MEMORY_REASON });
    await until(async () => (grown(before, await scrapeMetrics())[slowCloses] ?? 0) >= 1, "the close in /metrics");
    expect(grown(before, await scrapeMetrics())[slowCloses]).toBe(1);
    expect(await channelStats(ch)).toMatchObject({ websockets: 0, slow_consumers_closed: 1 });
  });
});
