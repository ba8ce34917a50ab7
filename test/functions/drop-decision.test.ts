/** The before-publish function on its own: injected store, clock, random source and logger. */
import { describe, expect, it, vi } from "vitest";
import {
  beforePublish,
  CHANNEL_RATE_TTL_MS,
  DropRateReader,
  parseStoredRate,
  type RateStore,
  rateKey,
} from "../../functions/before-publish";
import { clampRate } from "../../functions/sampler";
import { shardKey } from "../../functions/shard-key";
import { seededRandom } from "../support/seeded-random";

const CH = "public:live.reactions";
const ANALYTICS = "private:floodgate.analytics.dropped";

function memoryStore(values: Record<string, string>): RateStore & { reads: string[] } {
  const reads: string[] = [];
  return {
    reads,
    async get(key: string) {
      reads.push(key);
      return values[key] ?? null;
    },
  };
}

function reader(store: RateStore, opts: { fallbackRate?: number; cacheMs?: number; now?: () => number } = {}) {
  const logs: string[] = [];
  const r = new DropRateReader({
    store,
    fallbackRate: opts.fallbackRate ?? 0,
    cacheMs: opts.cacheMs ?? 0,
    now: opts.now ?? (() => 0),
    log: (m) => logs.push(m),
  });
  return { r, logs };
}

async function dropShare(rate: string, n: number, seed = 42): Promise<number> {
  const { r } = reader(memoryStore({ [rateKey(CH)]: rate }));
  const random = seededRandom(seed);
  let dropped = 0;
  for (let i = 0; i < n; i++) {
    const d = await beforePublish(CH, { reader: r, random, analyticsChannel: ANALYTICS });
    if (d.action === "drop") dropped++;
  }
  return dropped / n;
}

describe("drop decision", () => {
  it("rate 0 delivers everything", async () => {
    expect(await dropShare("0", 2000)).toBe(0);
  });

  it("rate 1 drops everything", async () => {
    expect(await dropShare("1", 2000)).toBe(1);
  });

  it("rate 0.5 drops about half (seeded)", async () => {
    const share = await dropShare("0.5", 4000);
    // Binomial sd at n=4000 is 0.0079; ±0.03 is almost 4 sd.
    expect(share).toBeGreaterThan(0.47);
    expect(share).toBeLessThan(0.53);
  });

  it("rate 0.9 drops about 90% and the same seed gives the same decisions", async () => {
    const a = await dropShare("0.9", 3000, 7);
    const b = await dropShare("0.9", 3000, 7);
    expect(a).toBe(b);
    expect(a).toBeGreaterThan(0.88);
    expect(a).toBeLessThan(0.92);
  });

  it("drops exactly when random() < rate", async () => {
    const { r } = reader(memoryStore({ [rateKey(CH)]: "0.25" }));
    const at = (x: number) => beforePublish(CH, { reader: r, random: () => x, analyticsChannel: ANALYTICS });
    expect((await at(0.2499)).action).toBe("drop");
    expect((await at(0.25)).action).toBe("deliver");
  });

  it("never throttles the analytics channel and does not even read the store for it", async () => {
    const store = memoryStore({ [rateKey(ANALYTICS)]: "1", throttleRate: "1" });
    const { r } = reader(store);
    const d = await beforePublish(ANALYTICS, { reader: r, random: () => 0, analyticsChannel: ANALYTICS });
    expect(d.action).toBe("deliver");
    expect(store.reads).toEqual([]);
  });
});

describe("reading the rate", () => {
  it("prefers the channel key, then the global key", async () => {
    const { r } = reader(memoryStore({ [rateKey(CH)]: "0.3", throttleRate: "0.7" }));
    expect(await r.rateFor(CH)).toEqual({ rate: 0.3, source: "channel" });
    expect(await r.rateFor("public:other.channel")).toEqual({ rate: 0.7, source: "global" });
  });

  it("a shard without its own key runs at its channel's key, then the global one; shards share the channel's read", async () => {
    let now = 0;
    const values: Record<string, string> = { [rateKey(CH)]: "0.4", throttleRate: "0.7" };
    const store = memoryStore(values);
    const { r } = reader(store, { cacheMs: 1000, now: () => now });
    const es = shardKey(CH, "es");
    const fr = shardKey(CH, "fr");
    expect(await r.rateFor(es)).toEqual({ rate: 0.4, source: "channel" });
    expect(await r.rateFor(fr)).toEqual({ rate: 0.4, source: "channel" });
    // Each shard's own key once, the channel's once, the global key never.
    expect(store.reads).toEqual([rateKey(es), rateKey(CH), rateKey(fr)]);
    values[rateKey(fr)] = "0.1";
    delete values[rateKey(CH)];
    now = 1000;
    expect(await r.rateFor(fr)).toEqual({ rate: 0.1, source: "channel" });
    expect(await r.rateFor(es)).toEqual({ rate: 0.7, source: "global" });
    // Invalidating the channel forgets its shards too (an admin write for all shards in this isolate).
    values[rateKey(CH)] = "1";
    r.invalidate(CH);
    expect((await r.rateFor(es)).rate).toBe(1);
  });

  it.each([
    ["1.5", 1],
    ["7", 1],
    ["-0.2", 0],
    ["-3e2", 0],
    ["2.5e-1", 0.25],
    [" 0.4 ", 0.4],
  ])("clamps %j to %d", async (stored, expected) => {
    const { r } = reader(memoryStore({ [rateKey(CH)]: stored }));
    expect((await r.rateFor(CH)).rate).toBe(expected);
  });

  it.each(["abc", "", "NaN", "Infinity", "0.5.1", "1,5", "{}", "0x1"])(
    "uses the fallback for the non-numeric value %j",
    async (stored) => {
      const { r, logs } = reader(memoryStore({ [rateKey(CH)]: stored }), { fallbackRate: 0.2 });
      expect(await r.rateFor(CH)).toEqual({ rate: 0.2, source: "fallback", cause: "non-numeric" });
      expect(logs).toHaveLength(1);
    },
  );

  it("uses the fallback when nothing is set", async () => {
    const { r } = reader(memoryStore({}), { fallbackRate: 0.1 });
    expect(await r.rateFor(CH)).toEqual({ rate: 0.1, source: "fallback", cause: "missing" });
  });

  it("uses the fallback when the store throws, and logs once per cause, not per message", async () => {
    const failing: RateStore = {
      get: async () => {
        throw new Error("KV exploded");
      },
    };
    const { r, logs } = reader(failing, { fallbackRate: 0.6 });
    for (let i = 0; i < 50; i++) {
      expect(await r.rateFor(CH)).toEqual({ rate: 0.6, source: "fallback", cause: "unreadable" });
    }
    expect(logs).toHaveLength(1);
    expect(logs[0]).toMatch(/unreadable/);
  });

  it("treats a read slower than the timeout as unreadable", async () => {
    const slow: RateStore = { get: () => new Promise(() => {}) };
    const logs: string[] = [];
    const r = new DropRateReader({
      store: slow,
      fallbackRate: 0.3,
      cacheMs: 0,
      readTimeoutMs: 20,
      log: (m) => logs.push(m),
    });
    expect(await r.rateFor(CH)).toEqual({ rate: 0.3, source: "fallback", cause: "unreadable" });
    expect(logs[0]).toMatch(/timed out/);
  });

  it("logs an outage again after the store has recovered in between", async () => {
    let broken = true;
    const store: RateStore = {
      get: async () => {
        if (broken) throw new Error("down");
        return "0.5";
      },
    };
    const { r, logs } = reader(store);
    await r.rateFor(CH);
    broken = false;
    await r.rateFor(CH);
    broken = true;
    await r.rateFor(CH);
    expect(logs).toHaveLength(2);
  });

  it("clamps the fallback rate too", () => {
    expect(clampRate(3)).toBe(1);
    expect(clampRate(Number.NaN)).toBe(0);
    expect(parseStoredRate("0.125")).toBe(0.125);
  });
});

describe("isolate cache", () => {
  it("reads the store at most once per channel per cacheMs, and concurrent misses share one read", async () => {
    let now = 1000;
    const store = memoryStore({ [rateKey(CH)]: "0.5" });
    const { r } = reader(store, { cacheMs: 1000, now: () => now });
    await Promise.all(Array.from({ length: 100 }, () => r.rateFor(CH)));
    expect(store.reads).toEqual([rateKey(CH)]);
    now += 999;
    await r.rateFor(CH);
    expect(store.reads).toHaveLength(1);
    now += 1;
    await r.rateFor(CH);
    expect(store.reads).toHaveLength(2);
  });

  it("a request that joined a read which never answers (its request was cancelled) reads for itself", async () => {
    vi.useFakeTimers();
    try {
      let reads = 0;
      const store: RateStore = {
        get(key) {
          reads++;
          // The first read hangs, as a KV read does when the request that started it is cancelled.
          return reads === 1 ? new Promise<never>(() => {}) : Promise.resolve(key === rateKey(CH) ? "0.25" : null);
        },
      };
      const r = new DropRateReader({ store, fallbackRate: 0, cacheMs: 60_000, readTimeoutMs: 1000, log: () => {} });
      void r.rateFor(CH);
      vi.clearAllTimers(); // its request is cancelled: the read's own timeout dies with it
      const joined = r.rateFor(CH);
      await vi.advanceTimersByTimeAsync(1999);
      expect(reads).toBe(1);
      await vi.advanceTimersByTimeAsync(20); // it checks on a timer of its own, every 2 ms at most
      await expect(joined).resolves.toEqual({ rate: 0.25, source: "channel" });
      expect(reads).toBe(2);
      // The fresh answer is cached for everyone after.
      await expect(r.rateFor(CH)).resolves.toEqual({ rate: 0.25, source: "channel" });
      expect(reads).toBe(2);
    } finally {
      vi.useRealTimers();
    }
  });

  it("a stale value is served until the cache expires, then the new one", async () => {
    let now = 0;
    const values: Record<string, string> = { [rateKey(CH)]: "0" };
    const { r } = reader(memoryStore(values), { cacheMs: 1000, now: () => now });
    expect((await r.rateFor(CH)).rate).toBe(0);
    values[rateKey(CH)] = "1";
    now = 500;
    expect((await r.rateFor(CH)).rate).toBe(0);
    now = 1000;
    expect((await r.rateFor(CH)).rate).toBe(1);
  });

  it("channels without their own key share one read of the global key per cacheMs", async () => {
    let now = 0;
    const values: Record<string, string> = { throttleRate: "0.3" };
    const store = memoryStore(values);
    const { r } = reader(store, { cacheMs: 1000, now: () => now });
    const channels = Array.from({ length: 50 }, (_, i) => `public:spread.c${i}`);
    for (const ch of channels) expect(await r.rateFor(ch)).toEqual({ rate: 0.3, source: "global" });
    // One read per channel key, and the global key once: not once per channel.
    expect(store.reads.filter((k) => k === "throttleRate")).toHaveLength(1);
    expect(store.reads).toHaveLength(51);
    // A channel with its own key still wins over the cached global one.
    values[rateKey("public:spread.own")] = "0.9";
    expect(await r.rateFor("public:spread.own")).toEqual({ rate: 0.9, source: "channel" });
    // The global value is re-read once it expires, and at once after invalidate("*").
    values.throttleRate = "0.6";
    now = 1000;
    expect((await r.rateFor("public:spread.c0")).rate).toBe(0.6);
    values.throttleRate = "0.7";
    r.invalidate("*");
    expect((await r.rateFor("public:spread.c1")).rate).toBe(0.7);
  });

  it("invalidate() makes the next read go to the store", async () => {
    const values: Record<string, string> = { [rateKey(CH)]: "0" };
    const { r } = reader(memoryStore(values), { cacheMs: 60_000 });
    await r.rateFor(CH);
    values[rateKey(CH)] = "0.75";
    r.invalidate(CH);
    expect((await r.rateFor(CH)).rate).toBe(0.75);
  });
});

describe("the channel's own rate (fast loop)", () => {
  it("a warm isolate uses the rate the channel answered with; a cold one starts from KV", async () => {
    const now = 0;
    const store = memoryStore({ [rateKey(CH)]: "0.2" });
    const warm = reader(store, { cacheMs: 1000, now: () => now }).r;
    const cold = reader(store, { cacheMs: 1000, now: () => now }).r;
    expect(await warm.rateFor(CH)).toEqual({ rate: 0.2, source: "channel" });
    warm.offer(CH, 0.8);
    expect(await warm.rateFor(CH)).toEqual({ rate: 0.8, source: "fast-loop" });
    expect(await cold.rateFor(CH)).toEqual({ rate: 0.2, source: "channel" });
    // Clamped like a stored rate; null (a channel without a target) hands the channel back to KV.
    warm.offer(CH, 7);
    expect(await warm.rateFor(CH)).toEqual({ rate: 1, source: "fast-loop" });
    warm.offer(CH, null);
    expect(await warm.rateFor(CH)).toEqual({ rate: 0.2, source: "channel" });
  });

  it("stands in for KV for CHANNEL_RATE_TTL_MS after the last answer, then KV again", async () => {
    let now = 0;
    const store = memoryStore({ [rateKey(CH)]: "0.2" });
    const { r } = reader(store, { cacheMs: 1000, now: () => now });
    r.offer(CH, 0.6);
    now = CHANNEL_RATE_TTL_MS - 1;
    expect((await r.rateFor(CH)).rate).toBe(0.6);
    r.offer(CH, 0.65); // every answer renews it
    now += CHANNEL_RATE_TTL_MS - 1;
    expect((await r.rateFor(CH)).rate).toBe(0.65);
    now += 1;
    expect(await r.rateFor(CH)).toEqual({ rate: 0.2, source: "channel" });
    // An admin write in this isolate forgets it too.
    r.offer(CH, 0.9);
    r.invalidate(CH);
    expect((await r.rateFor(CH)).rate).toBe(0.2);
  });
});
