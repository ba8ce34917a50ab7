/**
 * Conflation by key for a subscriber's own rate (docs/api.md, "Each reader's rate"): on a channel with
 * a `CONFLATE_KEYS` rule (this suite's: `public:conflate.**` → `/match`, test/vitest.config.ts), a
 * message that finds no room is held as the latest of its key, replacing (and skipping) the one
 * before, and goes out as soon as room comes, held messages in seq order before anything newer. So
 * the last message a subscriber receives per key is that key's last published message, and an older
 * update never follows a newer one.
 */
import { describe, expect, it } from "vitest";
import { uniq, until, untilUnsubscribed } from "../support/helpers";
import { accounted, publishDirect, readerSocket, readerSse, relayClock } from "../support/reader-fixtures";
import { seededRandom } from "../support/seeded-random";

const HOUR = 3_600_000;

type Score = { match: string; score: number };

describe("conflation by key", () => {
  it("a TV overlay at 2/s gets each match's latest score, never an older one after a newer one", async () => {
    const ch = `public:conflate.${uniq()}`;
    const clock = await relayClock(ch);
    const all = await readerSocket(ch);
    const overlay = await readerSocket(ch, "?max_rate=2/s");
    const packed = await readerSocket(ch, "?max_rate=2/s&batch=1");
    const sse = await readerSse(ch, "?max_rate=2/s");
    const random = seededRandom(40);
    const matches = ["m1", "m2", "m3", "m4", "m5"];
    const last = new Map<string, number>();
    const n = 150; // 30 messages a second for 5 s
    for (let i = 0; i < n; i++) {
      clock.at += 33;
      const match = matches[Math.floor(random() * matches.length)] as string;
      const score = (last.get(match) ?? 0) + 1;
      last.set(match, score);
      await publishDirect(ch, { match, score });
      await until(() => all.messages.length === i + 1, `message ${i}`);
    }
    // Quiet now: what is held goes out as room comes (2 a second).
    for (let s = 0; s < 5; s++) {
      clock.at += 1000;
      await clock.tick();
    }
    for (const r of [overlay, packed, sse]) {
      await until(() => {
        const got = new Map<string, number>();
        for (const m of r.messages) got.set((m.data as Score).match, (m.data as Score).score);
        return [...last].every(([k, v]) => got.get(k) === v);
      }, "every match's last score");
      const seqs = r.messages.map((m) => m.seq);
      expect(seqs).toEqual([...seqs].sort((a, b) => a - b));
      const seen = new Map<string, number>();
      for (const m of r.messages) {
        const { match, score } = m.data as Score;
        expect(score).toBeGreaterThan(seen.get(match) ?? 0);
        seen.set(match, score);
      }
      expect(r.messages.length).toBeLessThan(n / 5);
      expect(r.messages.length).toBeGreaterThan(10);
    }
    clock.at += 2 * HOUR;
    await clock.tick();
    for (const r of [overlay, packed, sse]) {
      await until(() => accounted(r) === n, "summaries that add up");
    }
    overlay.ws.close();
    packed.ws.close();
    all.ws.close();
    await sse.cancel();
    await untilUnsubscribed(ch);
  });

  it("a message without a key at the pointer is skipped, not held; a held one it passes is not lost", async () => {
    const ch = `public:conflate.${uniq()}`;
    const clock = await relayClock(ch);
    const all = await readerSocket(ch);
    const one = await readerSocket(ch, "?max_rate=1/s");
    const data = [
      { match: "a", v: 1 },
      { match: "a", v: 2 },
      { other: true },
      { match: "b", v: 1 },
      { match: { x: 1 } },
    ];
    for (const [i, d] of data.entries()) {
      await publishDirect(ch, d);
      await until(() => all.messages.length === i + 1, `message ${i}`);
    }
    expect(one.messages.map((m) => m.data)).toEqual([{ match: "a", v: 1 }]);
    clock.at += 1000;
    await clock.tick();
    await until(() => one.messages.length === 2, "the first held one");
    clock.at += 1000;
    await clock.tick();
    await until(() => one.messages.length === 3, "the second held one");
    expect(one.messages.map((m) => m.data)).toEqual([
      { match: "a", v: 1 },
      { match: "a", v: 2 },
      { match: "b", v: 1 },
    ]);
    clock.at += 2 * HOUR;
    await clock.tick();
    await until(() => one.summaries.length === 1, "summary");
    expect(one.summaries[0]?.skipped).toBe(2);
    all.ws.close();
    one.ws.close();
    await untilUnsubscribed(ch);
  });
});
