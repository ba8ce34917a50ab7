/**
 * Limiter shards: many keys' buckets in one object, decided strictly per key in batches, refilled
 * continuously, rescaled on a limit change, durable across eviction, deleted per key when full.
 */
import { abortAllDurableObjects, evictDurableObject, runDurableObjectAlarm, runInDurableObject } from "cloudflare:test";
import { env } from "cloudflare:workers";
import { describe, expect, it } from "vitest";
import type { BatchChargeResult } from "../../src/limiter/bucket-charge";
import { LIMITER_SHARDS, shardOf, shardStub } from "../../src/limiter/limiter-shard";
import { limiterShardStub } from "../../src/platform/stubs";
import type { Limit } from "../../src/settings/limits";
import { adminHeaders, callAndWait, envWith, keysInOneShard, mint, publishTo, uniq } from "../support/helpers";

const hourly = (n: number): Limit => ({ rate: n, perMs: 3_600_000, burst: n }); // no refill in a test
const granted = (r: BatchChargeResult | undefined) => r?.granted ?? -1;
/** One key's charge of `count` through its shard, alone in its call. */
const charge = async (key: string, limit: Limit, count = 1, now?: number) =>
  (await shardStub(env, key).decide([{ key, limit, count }], now))[0] as BatchChargeResult;

describe("limiter shards", () => {
  it("spread keys over every shard", () => {
    const seen = new Set(Array.from({ length: 400 }, () => shardOf(`publish:${uniq()}`)));
    expect(seen.size).toBe(LIMITER_SHARDS);
  });

  it("concurrent batches over many keys of one shard admit exactly each key's burst", async () => {
    const keys = keysInOneShard(6);
    const s = shardStub(env, keys[0] as string);
    const limit = hourly(20);
    // 30 batches at once, each charging every key 1–5 times: 90 requests per key for 20 tokens.
    const batches = Array.from({ length: 30 }, (_, b) =>
      s.decide(keys.map((key, i) => ({ key, limit, count: 1 + ((b + i) % 5) }))),
    );
    const results = await Promise.all(batches);
    keys.forEach((_key, i) => {
      expect(results.reduce((sum, r) => sum + granted(r[i]), 0)).toBe(20);
    });
  });

  it("one key's bucket is its own: draining it leaves its shard-mates' buckets whole", async () => {
    const [a, b] = keysInOneShard(2) as [string, string];
    const s = shardStub(env, a);
    const limit = hourly(5);
    const [drained, untouched] = await s.decide([
      { key: a, limit, count: 9 },
      { key: b, limit, count: 0 },
    ]);
    expect(granted(drained)).toBe(5);
    expect(untouched).toMatchObject({ granted: 0, remaining: 5 });
  });

  it("a refund gives a charged token back, strictly in order with the charges, capped at the burst", async () => {
    const [key] = keysInOneShard(1) as [string];
    const s = shardStub(env, key);
    const limit = hourly(3);
    expect(granted((await s.decide([{ key, limit, count: 5 }]))[0])).toBe(3);
    // One back, then a charge of two in the same call: the refund comes first, so one is admitted.
    const [back] = await s.decide([{ key, limit, count: 0, refund: 1 }]);
    expect(back).toMatchObject({ granted: 0, remaining: 1 });
    expect(granted((await s.decide([{ key, limit, count: 2 }]))[0])).toBe(1);
    expect(granted((await s.decide([{ key, limit, count: 1, refund: 1 }]))[0])).toBe(1);
    // More back than was ever taken fills the bucket and no more.
    await s.decide([{ key, limit, count: 0, refund: 50 }]);
    expect((await s.peek(key))?.tokens).toBe(3);
    expect(granted((await s.decide([{ key, limit, count: 10 }]))[0])).toBe(3);
  });

  it("a denied charge consumes nothing", async () => {
    const [key] = keysInOneShard(1) as [string];
    const s = shardStub(env, key);
    const limit: Limit = { rate: 2, perMs: 3_600_000, burst: 2 };
    await s.decide([{ key, limit, count: 2 }]);
    const before = await s.peek(key);
    for (let i = 0; i < 10; i++) expect(granted((await s.decide([{ key, limit, count: 3 }]))[0])).toBe(0);
    const after = await s.peek(key);
    expect(after?.tokens).toBeGreaterThanOrEqual(before?.tokens ?? 0);
    expect(after?.tokens).toBeLessThan(0.01);
  });

  it("200 concurrent single charges of one key of burst 50 admit exactly 50, the rest told when to retry", async () => {
    const key = `publish:${uniq()}`;
    const results = await Promise.all(Array.from({ length: 200 }, () => charge(key, hourly(50))));
    expect(results.filter((r) => r.granted === 1)).toHaveLength(50);
    const denied = results.filter((r) => r.granted === 0);
    expect(denied).toHaveLength(150);
    expect(denied.every((r) => r.remaining === 0 && r.retryAfterMs > 0)).toBe(true);
  });

  it("concurrent batches of one key grant exactly its burst in total, none more than it asked", async () => {
    const key = `publish:${uniq()}`;
    const counts = Array.from({ length: 20 }, (_, i) => 1 + (i % 7));
    const results = await Promise.all(counts.map((n) => charge(key, hourly(50), n)));
    expect(results.reduce((sum, r) => sum + r.granted, 0)).toBe(50);
    results.forEach((r, i) => {
      expect(r.granted).toBeLessThanOrEqual(counts[i] as number);
    });
    expect((await charge(key, hourly(50))).granted).toBe(0);
  });

  it("refill is continuous: half a period later, half the tokens are back, and the stored row agrees", async () => {
    const key = `publish:${uniq()}`;
    const limit: Limit = { rate: 10, perMs: 60_000, burst: 10 };
    const t0 = 1_000_000;
    expect((await charge(key, limit, 10, t0)).granted).toBe(10);
    // The shard's clock is a parameter: half a period later without sleeping.
    const results = [];
    for (let i = 0; i < 8; i++) results.push((await charge(key, limit, 1, t0 + 30_000)).granted);
    expect(results.filter((g) => g === 1)).toHaveLength(5);
    // The row on disk, not the copy in memory the shard decided from.
    await runInDurableObject(shardStub(env, key), (_i, state) => {
      const row = state.storage.sql.exec<{ tokens: number }>("SELECT tokens FROM bucket WHERE key = ?", key).one();
      expect(row.tokens).toBeCloseTo(0, 6);
    });
  });

  it("a changed limit rescales a key's bucket instead of resetting it to full", async () => {
    const small = hourly(10);
    const bigger = hourly(100);
    const empty = `publish:${uniq()}`;
    expect((await charge(empty, small, 10)).granted).toBe(10);
    expect((await charge(empty, bigger)).granted).toBe(0);
    // Half full at 10 is half full at 100: 50 of 80 concurrent charges.
    const half = `publish:${uniq()}`;
    expect((await charge(half, small, 5)).granted).toBe(5);
    const results = await Promise.all(Array.from({ length: 80 }, () => charge(half, bigger)));
    expect(results.filter((r) => r.granted === 1)).toHaveLength(50);
  });

  it("eviction or an abort does not refill any key of a shard", async () => {
    const keys = keysInOneShard(3);
    const limit = hourly(4);
    await shardStub(env, keys[0] as string).decide(keys.map((key) => ({ key, limit, count: 4 })));
    await evictDurableObject(shardStub(env, keys[0] as string));
    const again = await shardStub(env, keys[0] as string).decide(keys.map((key) => ({ key, limit, count: 1 })));
    expect(again.map(granted)).toEqual([0, 0, 0]);
    await abortAllDurableObjects();
    const afterAbort = await shardStub(env, keys[0] as string).decide(keys.map((key) => ({ key, limit, count: 1 })));
    expect(afterAbort.map(granted)).toEqual([0, 0, 0]);
  });

  it("the alarm deletes the rows of full buckets, key by key, and keeps the others", async () => {
    const [full, drained] = keysInOneShard(2) as [string, string];
    const s = shardStub(env, full);
    await s.decide([
      { key: full, limit: hourly(10), count: 1 },
      { key: drained, limit: hourly(10), count: 10 },
    ]);
    // An hour later for the first (refilled), both due: only the full one goes.
    await runInDurableObject(s, (_i, state) => {
      state.storage.sql.exec("UPDATE bucket SET updated_at = updated_at - 3600000 WHERE key = ?", full);
      state.storage.sql.exec("UPDATE bucket SET full_at = 0 WHERE key IN (?, ?)", full, drained);
    });
    await evictDurableObject(s);
    expect(await runDurableObjectAlarm(s)).toBe(true);
    expect(await s.peek(full)).toBeNull();
    expect((await s.peek(drained))?.tokens).toBeLessThan(0.01);
  });

  it("a charge sets the alarm for the earliest full bucket, never later, and the alarm sets itself again for the rest", async () => {
    // A shard object of its own, so no other test's buckets move its alarm.
    const s = limiterShardStub(env, `shard:test.${uniq()}`);
    const fullAtOf = (key: string) =>
      runInDurableObject(
        s,
        (_i, state) =>
          state.storage.sql.exec<{ at: number }>("SELECT full_at AS at FROM bucket WHERE key = ?", key).one().at,
      );
    const alarm = () => runInDurableObject(s, (_i, state) => state.storage.getAlarm());
    await s.decide([{ key: "soon", limit: { rate: 10, perMs: 60_000, burst: 10 }, count: 10 }]); // full in a minute
    const soon = await fullAtOf("soon");
    expect(await alarm()).toBe(soon);
    await s.decide([{ key: "later", limit: hourly(10), count: 10 }]); // full in an hour: the alarm stays
    expect(await alarm()).toBe(soon);
    // "soon" is full and due; the alarm deletes it and is set again, for "later".
    await runInDurableObject(s, (_i, state) => {
      state.storage.sql.exec("UPDATE bucket SET updated_at = updated_at - 60000, full_at = 0 WHERE key = 'soon'");
    });
    await evictDurableObject(s);
    expect(await runDurableObjectAlarm(s)).toBe(true);
    expect(await s.peek("soon")).toBeNull();
    expect(await alarm()).toBe(await fullAtOf("later"));
  });
});

describe("storage is bounded by activity", () => {
  it("a rate-limit bucket keeps its row in its shard until it is full again, then the shard's alarm deletes it", async () => {
    const sub = uniq("bucket");
    const key = `publish:${sub}`;
    // 10 an hour: three publishes leave it far from full for the whole test.
    const t = (await mint({ sub, channels: ["public:bounds.*"], rl: "10/h" })).access_token;
    for (let i = 0; i < 3; i++) expect((await publishTo(`public:bounds.${uniq()}`, t, i)).status).toBe(200);
    const stub = shardStub(env, key);
    const rows = () =>
      runInDurableObject(stub, (_i, state) => ({
        bucket: state.storage.sql.exec("SELECT * FROM bucket WHERE key = ?", key).toArray().length,
        lease: state.storage.sql.exec("SELECT * FROM lease WHERE key = ?", key).toArray().length,
      }));
    // Not full yet: the alarm keeps the bucket (strictness across eviction), and the next charge sees it.
    await runInDurableObject(stub, (_i, state) => {
      state.storage.sql.exec("UPDATE bucket SET full_at = 0 WHERE key = ?", key);
    });
    expect(await runDurableObjectAlarm(stub)).toBe(true);
    const kept = await stub.peek(key);
    expect(kept).not.toBeNull();
    expect(kept?.tokens).toBeLessThan(8);
    // Its lease (the first publish took a spare one) ends: its tokens count as spent from then on.
    const hourLater = () =>
      runInDurableObject(stub, (_i, state) => {
        state.storage.sql.exec("UPDATE bucket SET updated_at = updated_at - 3600000, full_at = 0 WHERE key = ?", key);
        state.storage.sql.exec("UPDATE lease SET expires_at = 0 WHERE key = ?", key);
      });
    await hourLater();
    await evictDurableObject(stub);
    expect(await runDurableObjectAlarm(stub)).toBe(true);
    // An hour after that (stored times moved back), the bucket is full: nothing is kept for it.
    await hourLater();
    await evictDurableObject(stub);
    expect(await runDurableObjectAlarm(stub)).toBe(true);
    expect(await rows()).toEqual({ bucket: 0, lease: 0 });
    // And the bucket starts full again.
    const [r] = await stub.decide([{ key, limit: { rate: 1, perMs: 3_600_000, burst: 5 }, count: 1 }]);
    expect(r).toMatchObject({ granted: 1, remaining: 4 });
  });
});

describe("a crowd over HTTP", () => {
  it("many subjects publishing at once each get exactly their burst, in far fewer limiter calls than requests", async () => {
    const e = envWith({ PUBLISH_RATE: "3/h", PUBLISH_BURST: "" });
    const tokens = await Promise.all(
      Array.from(
        { length: 24 },
        async () => (await mint({ sub: uniq("crowd"), channels: ["public:crowd.*"] })).access_token,
      ),
    );
    const ch = `public:crowd.${uniq()}`;
    const { services } = await import("../../src/worker/services");
    const callsBefore = services(e).gate.calls;
    // Every subject 5 times at once: 120 concurrent publishes for 72 tokens.
    const statuses = await Promise.all(
      tokens.flatMap((t) =>
        Array.from({ length: 5 }, () =>
          callAndWait(
            `/v1/publish/${ch}`,
            { method: "POST", headers: { authorization: `Bearer ${t}` }, body: "{}" },
            e,
          ),
        ),
      ),
    );
    for (let k = 0; k < tokens.length; k++) {
      const mine = statuses.slice(5 * k, 5 * k + 5).map((r) => r.status);
      expect(mine.filter((s) => s === 200)).toHaveLength(3);
      expect(mine.filter((s) => s === 429)).toHaveLength(2);
    }
    // One call per shard per wave instead of one per request.
    expect(services(e).gate.calls - callsBefore).toBeLessThan(tokens.length);
    const metrics = await (await callAndWait("/metrics", { headers: adminHeaders() }, e)).text();
    expect(metrics).toMatch(/floodgate_rate_limit_decisions_total\{bucket="publish",result="allowed"\} \d+/);
  });
});
