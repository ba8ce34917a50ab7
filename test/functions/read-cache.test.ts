/**
 * Reads shared for a moment (functions/read-cache.ts) with a fake clock, and the history pages a
 * snapshot answers (src/worker/reads/history-snapshot.ts) against a model of the channel's object,
 * property-based: every page it answers is the page the object would give.
 */
import fc from "fast-check";
import { afterEach, beforeEach, describe, expect, it, vi } from "vitest";
import { ReadCache } from "../../functions/read-cache";
import { PAGE_MAX_BYTES } from "../../src/relay/bounds";
import { pageFromSnapshot, SNAPSHOT_LIMIT, snapshotOf } from "../../src/worker/reads/history-snapshot";
import { RUNS } from "../support/property-inputs";

function cache(now: () => number, maxBytes = 1 << 20) {
  return new ReadCache<string>({
    ttlMs: 1000,
    maxEntries: 10,
    maxBytes,
    sizeOf: (v) => v.length,
    patienceMs: 2000,
    now,
  });
}

describe("read cache", () => {
  beforeEach(() => {
    vi.useFakeTimers();
  });
  afterEach(() => {
    vi.useRealTimers();
  });

  it("concurrent readers of one key make one ask; the answer is shared until 1 s after the ask began, never longer", async () => {
    let t = 0;
    const c = cache(() => t);
    let release!: (v: string) => void;
    let asks = 0;
    const ask = () => {
      asks++;
      return new Promise<string>((r) => (release = r));
    };
    const readers = Array.from({ length: 20 }, () => c.get("k", ask));
    await vi.advanceTimersByTimeAsync(5);
    expect(asks).toBe(1);
    t = 400; // the object took 400 ms to answer
    release("v1");
    await vi.advanceTimersByTimeAsync(5); // the waiters see the answer on their own timers
    expect(await Promise.all(readers)).toEqual(Array(20).fill("v1"));
    t = 999;
    expect(await c.get("k", async () => "v2")).toBe("v1");
    t = 1000; // a second after the ask began, not after the answer
    expect(await c.get("k", async () => "v2")).toBe("v2");
    expect(asks).toBe(1);
  });

  it("a failed ask is not kept, and those who waited for it ask themselves", async () => {
    const c = cache(() => 0);
    let fail!: (e: Error) => void;
    const first = c.get("k", () => new Promise<string>((_, reject) => (fail = reject)));
    const waiter = c.get("k", async () => "mine");
    fail(new Error("object down"));
    await expect(first).rejects.toThrow("object down");
    await vi.advanceTimersByTimeAsync(5);
    expect(await waiter).toBe("mine");
    expect(await c.get("k", async () => "next")).toBe("mine");
  });

  it("an ask that never answers (its request was cut off) holds the others back at most patienceMs", async () => {
    const c = cache(() => 0);
    void c.get("k", () => new Promise<string>(() => {}));
    const waiter = c.get("k", async () => "own");
    await vi.advanceTimersByTimeAsync(2100);
    expect(await waiter).toBe("own");
  });

  it("a fresh read never takes an answer asked before it, and waits out the spacing to share the next one", async () => {
    let t = 0;
    const c = cache(() => t);
    let asks = 0;
    const answers: ((v: string) => void)[] = [];
    const ask = () => {
      asks++;
      return new Promise<string>((r) => answers.push(r));
    };
    const old = c.get("k", ask);
    await vi.advanceTimersByTimeAsync(1);
    // The ask in flight began before these readers: they must not take its answer.
    const fresh = Array.from({ length: 10 }, () => c.getFresh("k", 100, ask));
    (answers[0] as (v: string) => void)("v1");
    await vi.advanceTimersByTimeAsync(5);
    expect(await old).toBe("v1");
    expect(asks).toBe(1);
    t = 100; // the spacing since the last ask is over: one of them asks, the rest share it
    await vi.advanceTimersByTimeAsync(100);
    expect(asks).toBe(2);
    (answers[1] as (v: string) => void)("v2");
    await vi.advanceTimersByTimeAsync(5);
    expect(await Promise.all(fresh)).toEqual(Array(10).fill("v2"));
    // An answer a fresh read brought is shared with every plain reader after it.
    expect(await c.get("k", ask)).toBe("v2");
    expect(asks).toBe(2);
  });

  it("fresh reads arriving all along cost at most one ask per spacing", async () => {
    let t = 0;
    const c = cache(() => t);
    let asks = 0;
    const ask = async () => `v${++asks}`;
    const reads: Promise<string>[] = [];
    for (let ms = 0; ms < 1000; ms += 5) {
      t = ms;
      reads.push(c.getFresh("k", 100, ask));
      await vi.advanceTimersByTimeAsync(5);
    }
    t = 1200;
    await vi.advanceTimersByTimeAsync(200);
    await Promise.all(reads);
    // Asked at 0, 100, …, 1,100 ms at most: 12 in the 1,200 ms the reads spanned.
    expect(asks).toBeGreaterThanOrEqual(10);
    expect(asks).toBeLessThanOrEqual(12);
  });

  it("keeps keys apart, and is bounded in bytes: an answer larger than the budget is answered, not kept", async () => {
    const c = cache(() => 0, 10);
    expect(await c.get("a", async () => "aaaa")).toBe("aaaa");
    expect(await c.get("b", async () => "bb")).toBe("bb");
    expect(await c.get("a", async () => "other")).toBe("aaaa");
    expect(await c.get("big", async () => "x".repeat(11))).toHaveLength(11);
    expect(await c.get("big", async () => "again")).toBe("again");
  });
});

/** The channel's object, modelled: retained messages `first..head`, each with its data. */
function frameOf(seq: number, data: string): string {
  return `{"type":"message","channel":"public:a.b","seq":${seq},"id":"i${seq}","data":${data},"published_at":1}`;
}

/** What the object answers (src/channel/messages.ts history): by seq, cut at PAGE_MAX_BYTES of data. */
function objectPage(rows: { seq: number; data: string }[], after: number | null, limit: number): string[] {
  const picked = after === null ? [...rows].reverse() : rows.filter((r) => r.seq > after);
  const out: { seq: number; data: string }[] = [];
  let bytes = 0;
  for (const r of picked.slice(0, limit)) {
    if (out.length > 0 && bytes + r.data.length > PAGE_MAX_BYTES) break;
    out.push(r);
    bytes += r.data.length;
  }
  if (after === null) out.reverse();
  return out.map((r) => frameOf(r.seq, r.data));
}

describe("history pages from a snapshot", () => {
  it("every page a snapshot answers is the page the object would give; it declines only what it may not hold", () => {
    fc.assert(
      fc.property(
        fc.integer({ min: 0, max: 50 }), // first retained seq - 1
        fc.integer({ min: 0, max: 1500 }), // retained messages
        fc.integer({ min: 1, max: 40_000 }), // data size of each
        fc.option(fc.integer({ min: 0, max: 1600 }), { nil: null }),
        fc.integer({ min: 1, max: 1000 }),
        (base, count, size, after, limit) => {
          const data = `"${"x".repeat(size)}"`;
          const rows = Array.from({ length: count }, (_, i) => ({ seq: base + i + 1, data }));
          const snapshot = snapshotOf(objectPage(rows, null, SNAPSHOT_LIMIT), 40_002);
          const page = pageFromSnapshot(snapshot, after, limit);
          const truth = objectPage(rows, after, limit);
          if (page !== null) expect(page).toEqual(truth);
          // Small channels (under the snapshot's messages and page bytes) are always answered.
          if (count < SNAPSHOT_LIMIT && count * (size + 120) + 40_002 < PAGE_MAX_BYTES) expect(page).not.toBeNull();
        },
      ),
      { ...RUNS, numRuns: 300 },
    );
  });

  it("answers from the newest messages of a long history, and leaves older pages to the object", () => {
    const rows = Array.from({ length: 3000 }, (_, i) => ({ seq: i + 1, data: "1" }));
    const snapshot = snapshotOf(objectPage(rows, null, SNAPSHOT_LIMIT), 10);
    expect(snapshot.complete).toBe(false);
    expect(pageFromSnapshot(snapshot, 2500, 100)).toEqual(objectPage(rows, 2500, 100));
    expect(pageFromSnapshot(snapshot, 2000, 100)).toEqual(objectPage(rows, 2000, 100)); // seq 2001 is its first
    expect(pageFromSnapshot(snapshot, 1999, 100)).toBeNull();
    expect(pageFromSnapshot(snapshot, null, 1000)).toEqual(objectPage(rows, null, 1000));
    expect(pageFromSnapshot(snapshot, 3000, 100)).toEqual([]);
  });
});
