/**
 * A slow subscriber is thinned before it is dropped (docs/api.md, "Slow subscribers"): past half of
 * the 1 MiB bound its relay holds it to half the rate it is taking, halving again while its backlog
 * grows, and tells it what it skipped; once it drains the thinning is lifted a step at a time; only
 * one still over the bound at 1/s is closed (4008; an SSE stream ends). Counted in stats (`readers`)
 * and `/metrics`. Real sockets that stop reading (a WebSocket not yet accepted, an SSE body not
 * read); the relay runs on the test's clock.
 */
import { runInDurableObject } from "cloudflare:test";
import { readSse } from "@floodgate/client";
import { describe, expect, it } from "vitest";
import { SUBSCRIBER_MAX_BEHIND_BYTES } from "../../src/relay/bounds";
import { SLOW_CONSUMER_CLOSE } from "../../src/wire/close-codes";
import {
  adminHeaders,
  callAndWait,
  channelStats,
  grown,
  relayObject,
  scrapeMetrics,
  seqOf,
  uniq,
  until,
  untilUnsubscribed,
} from "../support/helpers";
import {
  accounted,
  publishDirect,
  readerSocket,
  relayClock,
  type SubscriberSummaryFrame,
} from "../support/reader-fixtures";

const big = "x".repeat(30_000);

describe("slow subscribers are thinned before they are dropped", () => {
  it("a WebSocket that stops reading is thinned (summaries, counters) before it is closed with 4008", async () => {
    const ch = `public:slow.${uniq()}`;
    const clock = await relayClock(ch);
    const stalled = await readerSocket(ch, "", false); // never read until the end
    const live = await readerSocket(ch);
    const metricsBefore = await thinnedMetric("slow");
    const scrapeBefore = await scrapeMetrics();
    let n = 0;
    let thinnedSeen = false;
    // 10 messages a second until its relay closes it (it holds only the live one then).
    while ((await sockets(ch)) === 2 && n < 400) {
      for (let i = 0; i < 5; i++) {
        n++;
        clock.at += 100;
        await publishDirect(ch, { n, big });
        await until(() => live.messages.length === n, `message ${n}`);
      }
      thinnedSeen ||= (await channelStats(ch)).readers?.thinned === 1;
    }
    expect(thinnedSeen).toBe(true);
    // The reader that keeps up got everything.
    expect(live.messages.map((m) => m.seq)).toEqual(Array.from({ length: n }, (_, i) => i + 1));
    await until(async () => (await channelStats(ch)).slow_consumers_closed === 1, "the close counted");
    const stats = await channelStats(ch);
    expect(stats.readers?.thinned).toBe(0);
    expect(stats.readers?.skipped_total).toBeGreaterThan(0);
    expect(await thinnedMetric("slow")).toBeGreaterThan(metricsBefore);
    // Reading at last: messages in seq order with gaps, a last summary for the gaps, then 4008.
    stalled.ws.accept();
    await until(() => stalled.closed() !== null, "the close");
    expect(stalled.closed()?.code).toBe(SLOW_CONSUMER_CLOSE);
    // Counted once among the subscriptions Floodgate ended (docs/operations.md, "Metrics").
    const slowCloses = 'floodgate_subscriptions_closed_total{reason="slow"}';
    await until(
      async () => (grown(scrapeBefore, await scrapeMetrics())[slowCloses] ?? 0) >= 1,
      "the close in /metrics",
    );
    expect(grown(scrapeBefore, await scrapeMetrics())[slowCloses]).toBe(1);
    const seqs = stalled.messages.map((m) => m.seq);
    expect(seqs).toEqual([...seqs].sort((a, b) => a - b));
    expect(seqs.length).toBeLessThan(seqs.at(-1) ?? 0); // thinned: gaps
    expect(stalled.summaries.length).toBe(1);
    expect(JSON.parse(stalled.raw.at(-1)?.text ?? "{}")).toMatchObject({ type: "summary", scope: "subscriber" });
    expect(accounted(stalled)).toBe(seqs.length + (stats.readers?.skipped_total ?? 0));
    expect(accounted(stalled)).toBeGreaterThanOrEqual(seqs.at(-1) ?? 0);
    // And it resumes after the last message it got, nothing skipped from there.
    const resumed = await readerSocket(ch, `?after=${seqs.at(-1)}`);
    for (let i = 0; i < 5; i++) await publishDirect(ch, { n: n + i + 1 });
    const from = (seqs.at(-1) ?? 0) + 1;
    await until(() => resumed.messages.length === n + 5 - from + 1, "the resume's replay, then live");
    expect(resumed.messages.map((m) => m.seq)).toEqual(Array.from({ length: n + 5 - from + 1 }, (_, i) => from + i));
    resumed.ws.close();
    live.ws.close();
    await untilUnsubscribed(ch);
  });
});

describe("slow subscribers are thinned before they are dropped, over SSE and back", () => {
  it("an SSE reader that stops reading is thinned, then its stream ends after its last summary; the reading ones get everything", async () => {
    const ch = `public:slow.${uniq()}`;
    const clock = await relayClock(ch);
    const res = await callAndWait(`/v1/subscribe/${ch}`, { headers: { accept: "text/event-stream" } });
    expect(res.status).toBe(200); // its body is not read until the end
    const live = await readerSocket(ch);
    let n = 0;
    let thinnedSeen = false;
    while ((await channelStats(ch)).sse === 1 && n < 400) {
      for (let i = 0; i < 5; i++) {
        n++;
        clock.at += 100;
        await publishDirect(ch, { n, big });
        await until(() => live.messages.length === n, `message ${n}`);
      }
      thinnedSeen ||= (await channelStats(ch)).readers?.thinned === 1;
    }
    expect(thinnedSeen).toBe(true);
    expect(live.messages.map((m) => m.seq)).toEqual(Array.from({ length: n }, (_, i) => i + 1));
    expect((await channelStats(ch)).slow_consumers_closed).toBe(1);
    // What it kept (its backlog was discarded when it was cut off) is in seq order, with gaps, and
    // the stream's last event is its last summary: what it skipped while thinned.
    const kept: number[] = [];
    const events: { event: string; data: string }[] = [];
    await readSse(res.body as ReadableStream<Uint8Array>, (e) => {
      events.push({ event: e.event ?? "message", data: e.data });
      if (e.event === "message") kept.push(seqOf(e.id));
    });
    expect(kept).toEqual([...kept].sort((a, b) => a - b));
    expect(kept.length * big.length).toBeLessThan(SUBSCRIBER_MAX_BEHIND_BYTES); // not its whole backlog
    expect(events.at(-1)?.event).toBe("summary");
    const last = JSON.parse(events.at(-1)?.data ?? "{}") as SubscriberSummaryFrame;
    expect(last).toMatchObject({ type: "summary", scope: "subscriber", channel: ch });
    expect(last.skipped).toBeGreaterThan(0);
    live.ws.close();
    await untilUnsubscribed(ch);
  });

  it("a reader that catches up is lifted step by step and gets every message again; its summaries add up", async () => {
    const ch = `public:slow.${uniq()}`;
    const clock = await relayClock(ch);
    const slow = await readerSocket(ch, "", false);
    const live = await readerSocket(ch);
    let n = 0;
    const publish = async (count: number) => {
      for (let i = 0; i < count; i++) {
        n++;
        clock.at += 100;
        await publishDirect(ch, { n, big });
        await until(() => live.messages.length === n, `message ${n}`);
      }
    };
    while ((await channelStats(ch)).readers?.thinned !== 1 && n < 200) await publish(5);
    expect((await channelStats(ch)).readers?.thinned).toBe(1);
    // It reads again: its backlog drains, and a step at a time (1 s each) its rate comes back.
    slow.ws.accept();
    await until(() => slow.ws.bufferedAmount === 0, "the backlog to drain");
    const lifted = n;
    await publish(60);
    await until(async () => (await channelStats(ch)).readers?.thinned === 0, "the thinning lifted");
    const tail = slow.messages.map((m) => m.seq).filter((q) => q > lifted + 30);
    expect(tail).toEqual(Array.from({ length: n - lifted - 30 }, (_, i) => lifted + 31 + i));
    clock.at += 2 * 3_600_000;
    await clock.tick();
    await until(() => accounted(slow) === n, "summaries that add up");
    slow.ws.close();
    live.ws.close();
    await untilUnsubscribed(ch);
  });
});

/** The WebSockets relay 0 of `ch` still holds open. */
function sockets(ch: string): Promise<number> {
  return runInDurableObject(relayObject(ch), (r) => r.counts().websockets);
}

async function thinnedMetric(reason: string): Promise<number> {
  const res = await callAndWait("/metrics", { headers: adminHeaders() });
  const line = (await res.text())
    .split("\n")
    .find((l) => l.startsWith(`floodgate_readers_thinned_total{reason="${reason}"}`));
  return Number(line?.split(" ")[1] ?? 0);
}
