/**
 * Each reader takes what it can (docs/api.md, "Each reader's rate"): a subscriber with `?max_rate=`
 * receives at most that rate — a bucket, burst one second's worth — while the others get everything;
 * priority messages always pass; what it skips is told in its subscriber summaries, so that received +
 * skipped is everything the channel delivered while it was subscribed; a resume replays within the
 * same budget. Real sockets in workerd; the relay runs on the test's clock (test/support/reader-fixtures.ts).
 */
import { describe, expect, it } from "vitest";
import { channelStats, uniq, until, untilUnsubscribed } from "../support/helpers";
import { accounted, publishDirect, readerSocket, readerSse, relayClock } from "../support/reader-fixtures";

const HOUR = 3_600_000; // this suite's SUMMARY_INTERVAL (test/vitest.config.ts)

describe("max_rate", () => {
  it("holds a subscriber at 5/s on a channel carrying 40/s, every message it gets also delivered to the others, and its summaries add up", async () => {
    const ch = `public:rates.${uniq()}`;
    const clock = await relayClock(ch);
    const t0 = clock.at;
    const all = await readerSocket(ch);
    const five = await readerSocket(ch, "?max_rate=5/s");
    const packed = await readerSocket(ch, "?max_rate=300/m&batch=1");
    const seconds = 6;
    const sentAt = new Map<number, number>();
    for (let i = 0; i < seconds * 40; i++) {
      clock.at = t0 + i * 25;
      const seq = await publishDirect(ch, { i });
      sentAt.set(seq, i * 25);
      await until(() => all.messages.length === i + 1, `message ${i}`);
    }
    for (const r of [five, packed]) {
      const seqs = r.messages.map((m) => m.seq);
      expect(seqs).toEqual([...seqs].sort((a, b) => a - b));
      expect(new Set(seqs).size).toBe(seqs.length);
      const everyone = new Set(all.messages.map((m) => m.seq));
      for (const s of seqs) expect(everyone.has(s)).toBe(true);
      // Per second of the channel's time: a full bucket (5) and 5 more in the first, then 5 ± 10%.
      const perSecond = Array.from(
        { length: seconds },
        (_, s) => seqs.filter((q) => Math.floor((sentAt.get(q) ?? -1) / 1000) === s).length,
      );
      expect(perSecond[0]).toBeLessThanOrEqual(10);
      for (const n of perSecond.slice(1)) {
        expect(n).toBeGreaterThanOrEqual(4.5);
        expect(n).toBeLessThanOrEqual(5.5);
      }
    }
    expect(all.summaries).toEqual([]); // the unthrottled subscriber skipped nothing
    // Its summary comes once SUMMARY_INTERVAL has passed since its first skip, not before.
    expect(five.summaries).toEqual([]);
    clock.at = t0 + HOUR - 1;
    await clock.tick();
    expect(five.summaries).toEqual([]);
    clock.at = t0 + 2 * HOUR;
    await clock.tick();
    await until(() => five.summaries.length === 1 && packed.summaries.length === 1, "the first summaries");
    expect(five.summaries[0]).toMatchObject({ type: "summary", scope: "subscriber", channel: ch, to: clock.at });
    expect(five.summaries[0]?.by_key).toBeUndefined(); // no THROTTLE_SUMMARY rule on this channel
    for (const r of [five, packed]) expect(accounted(r)).toBe(seconds * 40);
    // More traffic: the next summary waits a whole interval after its own first skip.
    const t1 = clock.at;
    for (let i = 0; i < 40; i++) {
      clock.at = t1 + i * 25;
      await publishDirect(ch, { i: `b${i}` });
      await until(() => all.messages.length === seconds * 40 + i + 1, `message b${i}`);
    }
    clock.at = t1 + HOUR / 2;
    await clock.tick();
    clock.at = t1 + 2 * HOUR;
    await clock.tick();
    await until(() => five.summaries.length === 2, "the second summary");
    const [first, second] = five.summaries;
    expect(second?.to ?? 0).toBeGreaterThanOrEqual((first?.to ?? 0) + HOUR);
    expect(second?.from ?? 0).toBeGreaterThanOrEqual(first?.to ?? 0);
    expect(accounted(five)).toBe(seconds * 40 + 40);
    // Stats: the two thinned subscribers, and every skip (once reported: within a report's period).
    clock.at += HOUR;
    await clock.tick();
    const skipped = 2 * (seconds * 40 + 40) - five.messages.length - packed.messages.length;
    await until(async () => (await channelStats(ch)).readers?.skipped_total === skipped, "skips in stats");
    expect((await channelStats(ch)).readers).toEqual({ thinned: 2, skipped_total: skipped });
    for (const r of [all, five, packed]) r.ws.close();
    await untilUnsubscribed(ch);
  });

  it("always delivers priority messages, taking room when there is some", async () => {
    const ch = `public:rates.${uniq()}`;
    const clock = await relayClock(ch);
    const all = await readerSocket(ch);
    const one = await readerSocket(ch, "?max_rate=1/s");
    const priority = new Set<number>();
    for (let i = 0; i < 30; i++) {
      clock.at += 10; // 100 messages a second for 0.3 s
      const seq = await publishDirect(ch, { i }, i % 5 === 4);
      if (i % 5 === 4) priority.add(seq);
      await until(() => all.messages.length === i + 1, `message ${i}`);
    }
    const got = one.messages.map((m) => m.seq);
    // The first message fills its bucket's one message; then only the priority ones, every one.
    expect(got).toEqual([1, ...priority]);
    clock.at += 2 * HOUR;
    await clock.tick();
    await until(() => one.summaries.length === 1, "summary");
    expect(accounted(one)).toBe(30);
    all.ws.close();
    one.ws.close();
    await untilUnsubscribed(ch);
  });

  it("over SSE: the same budget, summaries as `event: summary` with no id", async () => {
    const ch = `public:rates.${uniq()}`;
    const clock = await relayClock(ch);
    const t0 = clock.at;
    const all = await readerSocket(ch);
    const sse = await readerSse(ch, "?max_rate=2/s");
    for (let i = 0; i < 40; i++) {
      clock.at = t0 + i * 50; // 20/s for 2 s
      await publishDirect(ch, { i });
      await until(() => all.messages.length === i + 1, `message ${i}`);
    }
    await until(() => sse.messages.length >= 5, "the SSE reader's share");
    expect(sse.messages.length).toBeLessThanOrEqual(2 + 2 * 2);
    clock.at = t0 + 2 * HOUR;
    await clock.tick();
    await until(() => sse.summaries.length === 1, "summary");
    const summaryEvent = sse.raw.find((e) => e.event === "summary");
    expect(summaryEvent?.id).toBeUndefined();
    expect(sse.raw.filter((e) => e.event === "message").every((e) => e.id !== undefined)).toBe(true);
    expect(accounted(sse)).toBe(40);
    all.ws.close();
    await sse.cancel();
    await untilUnsubscribed(ch);
  });

  it("a resume replays within the budget: what does not fit is skipped and counted like live", async () => {
    const ch = `public:rates.${uniq()}`;
    for (let i = 0; i < 50; i++) await publishDirect(ch, { i });
    const clock = await relayClock(ch);
    const sub = await readerSocket(ch, "?after=10&max_rate=5/s");
    await until(() => sub.messages.length === 5, "a bucket's worth of the replay");
    expect(sub.messages.map((m) => m.seq)).toEqual([11, 12, 13, 14, 15]);
    // Then live, within the same bucket: a second later there is room for 5 more.
    const all = await readerSocket(ch);
    clock.at += 1000;
    for (let i = 0; i < 10; i++) await publishDirect(ch, { live: i });
    await until(() => all.messages.length === 10, "live messages");
    expect(sub.messages.map((m) => m.seq)).toEqual([11, 12, 13, 14, 15, 51, 52, 53, 54, 55]);
    clock.at += 2 * HOUR;
    await clock.tick();
    await until(() => sub.summaries.length === 1, "summary");
    expect(sub.summaries[0]?.skipped).toBe(35 + 5);
    expect(accounted(sub)).toBe(60 - 10);
    sub.ws.close();
    all.ws.close();
    await untilUnsubscribed(ch);
  });
});
