/**
 * Whole charges: one request that takes several tokens at once (the copies of a Pusher event, each a
 * publish) is admitted with all of them or denied taking none, in the shard, from a lease, and with
 * other requests of its key in flight; the bucket's bound still holds.
 */
import { env } from "cloudflare:workers";
import { describe, expect, it } from "vitest";
import type { BatchChargeResult } from "../../src/limiter/bucket-charge";
import { LEASE_MIN_DEMAND } from "../../src/limiter/isolate-leases";
import { LimiterGate } from "../../src/limiter/limiter-gate";
import { shardStub } from "../../src/limiter/limiter-shard";
import type { Limit } from "../../src/settings/limits";
import { uniq } from "../support/helpers";

const hourly = (n: number): Limit => ({ rate: n, perMs: 3_600_000, burst: n }); // no refill in a test

/** `key`'s bucket in its shard: one whole entry of `count` tokens at `now`. */
const whole = async (key: string, limit: Limit, count: number, now: number) =>
  (await shardStub(env, key).decide([{ key, limit, count, whole: true }], now))[0] as BatchChargeResult;

/** One isolate's gate on the real shard of its keys, on a fake clock, counting shard calls and answers. */
function isolate(clock: { now: number }) {
  const seen = { calls: 0, fromLease: 0, admitted: 0 };
  const gate = new LimiterGate(
    {
      charge: (_shard, charges) => {
        seen.calls++;
        return shardStub(env, (charges[0] as { key: string }).key).decide(charges, clock.now);
      },
    },
    {
      decision: (_b, allowed, source) => {
        if (allowed) seen.admitted++;
        if (source === "lease") seen.fromLease++;
      },
      error: () => {},
    },
    () => clock.now,
  );
  return { gate, seen };
}

describe("a whole entry in the shard", () => {
  it("takes all its tokens or none, and says when they will all be back", async () => {
    const key = `publish:${uniq()}`;
    const limit: Limit = { rate: 1, perMs: 60_000, burst: 5 }; // 1/m, burst 5
    const t0 = 1_000_000;
    // More than the burst: denied, nothing taken.
    expect(await whole(key, limit, 6, t0)).toMatchObject({ granted: 0, remaining: 5 });
    expect((await shardStub(env, key).peek(key))?.tokens).toBe(5);
    expect((await whole(key, limit, 4, t0)).granted).toBe(4);
    // 1 left: 3 are denied, taking none, until 2 more have refilled (2 minutes).
    const denied = await whole(key, limit, 3, t0);
    expect(denied).toMatchObject({ granted: 0, remaining: 1, retryAfterMs: 120_000 });
    expect((await shardStub(env, key).peek(key))?.tokens).toBeCloseTo(1, 6);
    expect((await whole(key, limit, 1, t0)).granted).toBe(1);
    expect((await whole(key, limit, 3, t0 + 180_000)).granted).toBe(3);
  });
});

describe("a whole charge through the gate", () => {
  it("is spent from this isolate's lease when the lease holds it all, with no shard call", async () => {
    const clock = { now: 2_000_000 };
    const key = `publish:${uniq()}`;
    const limit = hourly(100);
    const { gate, seen } = isolate(clock);
    // The first charge takes a spare lease (16 of the 99 left) and the next 16 spend it; the 18th,
    // hot by then, takes a lease of 18 (its demand) from the 82 left.
    for (let i = 0; i < 18; i++) await gate.check("publish", key, limit);
    expect(seen.calls).toBe(2);
    const [calls, leased] = [seen.calls, seen.fromLease];
    const inBucket = (await shardStub(env, key).peek(key))?.tokens ?? 0;
    expect(inBucket).toBeCloseTo(64, 6);
    expect((await gate.chargeAll("publish", key, limit, 10)).denial).toBeUndefined();
    expect(seen.calls).toBe(calls);
    expect(seen.fromLease).toBe(leased + 10);
    expect((await shardStub(env, key).peek(key))?.tokens).toBeCloseTo(inBucket, 6);
  });

  it("more than the lease holds: one shard call that settles the lease first, so its tokens count", async () => {
    const clock = { now: 3_000_000 };
    const key = `publish:${uniq()}`;
    const limit = hourly(20);
    const { gate, seen } = isolate(clock);
    for (let i = 0; i <= LEASE_MIN_DEMAND; i++) await gate.check("publish", key, limit);
    // 5 admitted: 15 left, some on this isolate's lease (a spare one), the rest in the bucket.
    expect((await shardStub(env, key).peek(key))?.tokens).toBeLessThan(15);
    const calls = seen.calls;
    // 15 at once: neither the lease nor the bucket alone holds them, together they do.
    expect((await gate.chargeAll("publish", key, limit, 15)).denial).toBeUndefined();
    expect(seen.calls).toBe(calls + 1);
    expect((await shardStub(env, key).peek(key))?.tokens).toBeCloseTo(0, 1);
    expect((await gate.chargeAll("publish", key, limit, 1)).denial).toBeDefined();
  });

  it("denied, takes nothing: from the lease or the bucket, the requests after it are admitted as before", async () => {
    const clock = { now: 4_000_000 };
    const key = `publish:${uniq()}`;
    const limit = hourly(20);
    const { gate, seen } = isolate(clock);
    for (let i = 0; i <= LEASE_MIN_DEMAND; i++) await gate.check("publish", key, limit);
    // 15 left in all (lease and bucket): 16 are refused, twice (a whole denial is not cached) ...
    const denied = await gate.chargeAll("publish", key, limit, 16);
    expect(denied.denial?.retryAfterMs).toBeGreaterThan(0);
    expect((await gate.chargeAll("publish", key, limit, 16)).denial).toBeDefined();
    // ... and every one of the 15 is still there, one request at a time.
    const admittedBefore = seen.admitted;
    const singles = await Promise.all(Array.from({ length: 16 }, () => gate.charge("publish", key, limit)));
    expect(singles.filter((r) => !r.denial)).toHaveLength(15);
    expect(seen.admitted - admittedBefore).toBe(15);
  });

  it("concurrent whole and single charges from two isolates never admit more than the bucket, and each whole one all or none", async () => {
    const clock = { now: 5_000_000 };
    const key = `publish:${uniq()}`;
    const limit = hourly(40);
    const isolates = [isolate(clock), isolate(clock)];
    const wholes: Promise<{ tokens: number; admitted: boolean }>[] = [];
    const singles: Promise<boolean>[] = [];
    for (let round = 0; round < 6; round++) {
      for (const [k, { gate }] of isolates.entries()) {
        for (const tokens of [3, 5]) {
          wholes.push(gate.chargeAll("publish", key, limit, tokens).then((r) => ({ tokens, admitted: !r.denial })));
        }
        for (let i = 0; i < 2 + k; i++) singles.push(gate.charge("publish", key, limit).then((r) => !r.denial));
      }
      await Promise.all([...wholes, ...singles]);
    }
    const taken =
      (await Promise.all(wholes)).reduce((a, w) => a + (w.admitted ? w.tokens : 0), 0) +
      (await Promise.all(singles)).filter(Boolean).length;
    expect(taken).toBeLessThanOrEqual(40);
    // Every token is accounted for: taken, in the bucket, or on a lease this isolate may still spend.
    const admitted = isolates.reduce((a, i) => a + i.seen.admitted, 0);
    expect(admitted).toBe(taken);
    expect(taken).toBeGreaterThan(30);
  });
});

describe("giving back a whole charge", () => {
  it("goes onto this isolate's lease while one is spent, else back to the bucket with one call", async () => {
    const clock = { now: 6_000_000 };
    const key = `publish:${uniq()}`;
    const limit = hourly(10);
    const { gate, seen } = isolate(clock);
    // No lease (a cold key's spare lease is above half the burst: 1 of 9 after one request; then none).
    expect((await gate.chargeAll("publish", key, limit, 9)).denial).toBeUndefined();
    const calls = seen.calls;
    await gate.giveBack("publish", key, limit, 9);
    expect(seen.calls).toBe(calls + 1);
    expect((await shardStub(env, key).peek(key))?.tokens).toBeCloseTo(10, 1);
    // Hot: a lease is out; a give-back goes onto it, no call, and is spent again.
    const hot = `publish:${uniq()}`;
    const big = hourly(100);
    for (let i = 0; i <= LEASE_MIN_DEMAND; i++) await gate.check("publish", hot, big);
    expect((await gate.chargeAll("publish", hot, big, 3)).denial).toBeUndefined();
    const before = seen.calls;
    await gate.giveBack("publish", hot, big, 3);
    expect(seen.calls).toBe(before);
    const leased = seen.fromLease;
    expect((await gate.chargeAll("publish", hot, big, 3)).denial).toBeUndefined();
    expect(seen.fromLease).toBe(leased + 3);
  });
});
