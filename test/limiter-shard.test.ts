/**
 * Limiter shards: many keys' buckets in one object, decided strictly per key in batches, durable
 * across eviction, deleted per key when full, and the hand-over of buckets from the previous
 * release's per-key objects (RateLimiter) during and after a deploy.
 */
import { abortAllDurableObjects, evictDurableObject, runDurableObjectAlarm, runInDurableObject } from "cloudflare:test";
import { env } from "cloudflare:workers";
import { describe, expect, it } from "vitest";
import { type KeyResult, LIMITER_SHARDS, shardOf, shardStub } from "../src/rate-limit/limiter-shard";
import type { Limit } from "../src/rate-limit/limits";
import { EMPTY_HAND_OVER_MS, RateLimiter } from "../src/rate-limit/rate-limiter";
import { adminHeaders, callAndWait, envWith, keysInOneShard, mint, uniq, withFailing } from "./helpers";

const hourly = (n: number): Limit => ({ rate: n, perMs: 3_600_000, burst: n }); // no refill in a test
const legacy = (key: string) => env.RATE_LIMITER.get(env.RATE_LIMITER.idFromName(key));
const granted = (r: KeyResult | undefined) => (r && !("error" in r) ? r.granted : -1);

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
    const { services } = await import("../src/platform/services");
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

describe("moving in from per-key objects", () => {
  it("a key's old bucket carries over: the shard continues it strictly, and the old object forwards from then on", async () => {
    const key = `publish:${uniq()}`;
    const limit = hourly(10);
    // The previous release charged 7 of 10 through the key's own object.
    expect((await legacy(key).chargeMany(limit, 7)).granted).toBe(7);
    // The new path: 3 left, not a fresh 10.
    const [first] = await shardStub(env, key).decide([{ key, limit, count: 10 }]);
    expect(granted(first)).toBe(3);
    // The old object kept nothing of its own; an isolate on the old code asking it gets the shard's answer.
    expect(await legacy(key).peek()).toBeNull();
    expect((await legacy(key).chargeMany(limit, 5)).granted).toBe(0);
    expect((await shardStub(env, key).peek(key))?.tokens).toBeLessThan(0.01);
  });

  it("old and new paths charging at once, during and after the hand-over, never admit more than the old bucket held", async () => {
    const key = `publish:${uniq()}`;
    const limit = hourly(30);
    expect((await legacy(key).chargeMany(limit, 10)).granted).toBe(10); // 20 left
    const both = (n: number) =>
      Promise.all(
        Array.from({ length: n }, (_, i) =>
          i % 2 === 0
            ? shardStub(env, key)
                .decide([{ key, limit, count: 2 }])
                .then((r) => granted(r[0]))
            : legacy(key)
                .chargeMany(limit, 2)
                .then((r) => r.granted),
        ),
      );
    // While the hand-over is under way, then once it is done: 20 tokens in all, whichever path asks.
    const during = await both(10);
    const after = await both(20);
    const all = [...during, ...after];
    expect(all.every((g) => g >= 0)).toBe(true);
    expect(all.reduce((a, b) => a + b, 0)).toBe(20);
  });

  it("open leases of the old bucket still count after the hand-over, and can be settled through either path", async () => {
    const key = `publish:${uniq()}`;
    const limit: Limit = { rate: 10, perMs: 1000, burst: 10 };
    const now = Date.now();
    const { lease } = await legacy(key).chargeMany(limit, 2, now, { want: 8, settle: [] });
    expect(lease?.tokens).toBe(4); // half of the 8 left
    // A second later the bucket alone would be full; with 4 on lease it holds 6, in the shard too.
    const [held] = await shardStub(env, key).decide([{ key, limit, count: 0 }], now + 1000);
    expect(held).toMatchObject({ remaining: 6 });
    // The old isolate settles its lease through the old object: the 3 unused come back once.
    const settle = [{ id: lease?.id ?? "", unused: 3 }];
    expect((await legacy(key).chargeMany(limit, 0, now + 1000, { want: 0, settle })).remaining).toBe(9);
    expect((await legacy(key).chargeMany(limit, 0, now + 1000, { want: 0, settle })).remaining).toBe(9);
  });

  it("a shard that lost a key's row takes the same old state again, never a fresh bucket", async () => {
    const key = `publish:${uniq()}`;
    const limit = hourly(10);
    expect((await legacy(key).chargeMany(limit, 8)).granted).toBe(8);
    const s = shardStub(env, key);
    expect(granted((await s.decide([{ key, limit, count: 0 }]))[0])).toBe(0);
    // As if the shard restarted between taking the state and storing it.
    await runInDurableObject(s, (_i, state) => {
      state.storage.sql.exec("DELETE FROM bucket WHERE key = ?", key);
    });
    await evictDurableObject(s);
    expect(granted((await s.decide([{ key, limit, count: 5 }]))[0])).toBe(2);
  });

  it("an old object that cannot hand over fails its key closed, and only its key", async () => {
    const [stuck, other] = keysInOneShard(2) as [string, string];
    const limit = hourly(5);
    const stuckId = env.RATE_LIMITER.idFromName(stuck).toString();
    // Like an object still running the previous code, which has no handOver: only `stuck`'s.
    const results = await withFailing(
      RateLimiter,
      "handOver",
      "old code: no such method",
      () =>
        shardStub(env, stuck).decide([
          { key: stuck, limit, count: 1 },
          { key: other, limit, count: 1 },
        ]),
      (i) => (i.ctx as DurableObjectState).id.toString() === stuckId,
    );
    expect(results[0]).toMatchObject({ error: expect.any(String) });
    expect(granted(results[1])).toBe(1);
    // Nothing was decided for it: once the old object answers, its bucket is whole.
    expect(granted((await shardStub(env, stuck).decide([{ key: stuck, limit, count: 9 }]))[0])).toBe(5);
  });

  it("an old object that had nothing to hand over forwards for an hour, not a whole window", async () => {
    const key = `publish:${uniq()}`;
    const limit = hourly(10);
    const before = Date.now();
    expect(granted((await shardStub(env, key).decide([{ key, limit, count: 1 }]))[0])).toBe(1);
    const until = await runInDurableObject(
      legacy(key),
      (_i, state) => state.storage.sql.exec<{ until: number }>("SELECT until FROM handed_over").one().until,
    );
    expect(until).toBeGreaterThanOrEqual(before + EMPTY_HAND_OVER_MS);
    expect(until).toBeLessThan(Date.now() + EMPTY_HAND_OVER_MS + 1000);
    // Meanwhile an isolate on the previous code asking it gets the shard's answer: 9 left, not 10.
    expect((await legacy(key).chargeMany(limit, 20)).granted).toBe(9);
  });

  it("a handed-over object keeps what it handed over until its shard stops asking, then deletes everything", async () => {
    const key = `publish:${uniq()}`;
    const limit = hourly(10);
    await legacy(key).chargeMany(limit, 4);
    await shardStub(env, key).decide([{ key, limit, count: 1 }]);
    const tables = () =>
      runInDurableObject(
        legacy(key),
        (_i, state) => state.storage.sql.exec<{ n: number }>("SELECT COUNT(*) AS n FROM handed_over").one().n,
      );
    expect(await runDurableObjectAlarm(legacy(key))).toBe(true);
    expect(await tables()).toBe(1);
    await runInDurableObject(legacy(key), (_i, state) => {
      state.storage.sql.exec("UPDATE handed_over SET until = 0");
    });
    await evictDurableObject(legacy(key));
    expect(await runDurableObjectAlarm(legacy(key))).toBe(true);
    const left = await runInDurableObject(legacy(key), (_i, state) =>
      state.storage.sql
        .exec(
          "SELECT name FROM sqlite_master WHERE type = 'table' AND name NOT LIKE '\\_%' ESCAPE '\\' AND name NOT LIKE 'sqlite%'",
        )
        .toArray(),
    );
    expect(left).toEqual([]);
    expect(await legacy(key).peek()).toBeNull();
  });
});
