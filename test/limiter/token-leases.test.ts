/**
 * Token leases: a hot isolate spends tokens it took from the bucket ahead of time, with no object
 * call per request, and the bucket's bound still holds for every interval.
 */
import { evictDurableObject } from "cloudflare:test";
import { env } from "cloudflare:workers";
import { describe, expect, it } from "vitest";
import {
  type BatchChargeResult,
  LEASE_SPEND_MS,
  LEASE_TTL_MS,
  type LeaseRequest,
  SPARE_LEASE_MAX,
  SPARE_LEASE_SPEND_MS,
} from "../../src/limiter/bucket-charge";
import { IsolateLeases, LEASE_MIN_DEMAND } from "../../src/limiter/isolate-leases";
import { type BucketBackend, LimiterGate } from "../../src/limiter/limiter-gate";
import { shardName, shardStub } from "../../src/limiter/limiter-shard";
import { fullBucket, take } from "../../src/limiter/token-bucket";
import { limiterShardStub } from "../../src/platform/stubs";
import type { Limit } from "../../src/settings/limits";
import { adminHeaders, callAndWait, envWith, keysInOneShard, mint, perKey, uniq } from "../support/helpers";
import { seededRandom } from "../support/seeded-random";

/** `key`'s bucket in its shard, charged alone: `count` requests at `now`, asking for `lease`. */
const bucket = (key: string) => ({
  charge: async (limit: Limit, count: number, now: number, lease?: LeaseRequest) =>
    (
      await shardStub(env, key).decide([{ key, limit, count, ...(lease ? { lease } : {}) }], now)
    )[0] as BatchChargeResult,
  peek: () => shardStub(env, key).peek(key),
});
const hourly = (n: number): Limit => ({ rate: n, perMs: 3_600_000, burst: n }); // no refill in a test

describe("leases of a key's bucket", () => {
  it("are granted only when the whole batch is, at most half of what is left, and taken from the bucket", async () => {
    const s = bucket(`publish:${uniq()}`);
    const l = hourly(100);
    const first = await s.charge(l, 10, 0, { want: 80, settle: [] });
    expect(first).toMatchObject({ granted: 10, remaining: 45, lease: { tokens: 45 } });
    expect((await s.peek())?.tokens).toBeCloseTo(45, 6);
    // 50 asked, 45 left: 45 granted, no lease for a batch that was not granted in full.
    const second = await s.charge(l, 50, 0, { want: 80, settle: [] });
    expect(second.granted).toBe(45);
    expect(second.lease).toBeUndefined();
    // Without `want` nothing is leased.
    const s2 = bucket(`publish:${uniq()}`);
    expect((await s2.charge(l, 1, 0)).lease).toBeUndefined();
  });

  it("leased tokens count as in the bucket until settled; unused ones come back once", async () => {
    const s = bucket(`publish:${uniq()}`);
    const l: Limit = { rate: 10, perMs: 1000, burst: 10 }; // 10/s
    const { lease } = await s.charge(l, 2, 0, { want: 8, settle: [] });
    expect(lease?.tokens).toBe(4); // half of the 8 left
    // 1 s later the bucket alone would be full again; with 4 on lease it refills to 6 only.
    const held = await s.charge(l, 0, 1000, { want: 0, settle: [] });
    expect(held.remaining).toBe(6);
    // The isolate used 1 of the 4: the 3 unused come back (to 9), and settling again changes nothing.
    const id = lease?.id ?? "";
    expect((await s.charge(l, 0, 1000, { want: 0, settle: [{ id, unused: 3 }] })).remaining).toBe(9);
    expect((await s.charge(l, 0, 1000, { want: 0, settle: [{ id, unused: 3 }] })).remaining).toBe(9);
    // A settle never returns more than the lease held.
    const again = await s.charge(l, 0, 1000, { want: 8, settle: [] });
    const other = again.lease?.id ?? "";
    const after = await s.charge(l, 0, 1000, { want: 0, settle: [{ id: other, unused: 1000 }] });
    expect(after.remaining).toBe(9);
  });

  it("an evicted shard still counts a key's open leases (a new instance reads them back)", async () => {
    const key = `publish:${uniq()}`;
    const l: Limit = { rate: 10, perMs: 1000, burst: 10 };
    const { lease } = await bucket(key).charge(l, 2, 0, { want: 8, settle: [] });
    expect(lease?.tokens).toBe(4);
    await evictDurableObject(shardStub(env, key));
    // As before eviction: 1 s later the bucket refills to 6, not 10, while 4 are on lease.
    expect((await bucket(key).charge(l, 0, 1000, { want: 0, settle: [] })).remaining).toBe(6);
    expect(
      (await bucket(key).charge(l, 0, 1000, { want: 0, settle: [{ id: lease?.id ?? "", unused: 4 }] })).remaining,
    ).toBe(10);
  });

  it("a lease nobody settles ends after LEASE_TTL_MS, its tokens counted as spent", async () => {
    const s = bucket(`publish:${uniq()}`);
    const l = hourly(100);
    const { lease } = await s.charge(l, 0, 0, { want: 30, settle: [] });
    expect(lease?.tokens).toBe(30);
    const later = await s.charge(l, 0, LEASE_TTL_MS, { want: 0, settle: [{ id: lease?.id ?? "", unused: 30 }] });
    expect(later.remaining).toBe(70); // too late to settle: the 30 are gone
  });

  it("when every token is on lease, a denial's Retry-After waits for the first lease to end", async () => {
    const s = bucket(`publish:${uniq()}`);
    const l: Limit = { rate: 1, perMs: 1000, burst: 2 };
    const { lease } = await s.charge(l, 0, 0, { want: 1, settle: [] }); // 1 of 2
    expect(lease?.tokens).toBe(1);
    await s.charge(l, 1, 0); // the other one
    const denied = await s.charge(l, 1, 100);
    expect(denied.granted).toBe(0);
    // Without the lease the next token would be back at 1,000 ms; with it the bucket caps at 1 token
    // and refills that one in time, so the wait is the refill, not the lease.
    expect(denied.retryAfterMs).toBe(900);
    const all = bucket(`publish:${uniq()}`);
    const tight: Limit = { rate: 1, perMs: 1000, burst: 1 };
    await all.charge(tight, 0, 0, { want: 1, settle: [] }); // nothing: half of 1 is 0
    expect((await all.charge(tight, 0, 0, { want: 1, settle: [] })).lease).toBeUndefined();
  });

  it("many isolates spending leases never admit more than burst + rate × interval, in any interval", async () => {
    const key = `publish:${uniq()}`;
    const limit: Limit = { rate: 50, perMs: 1000, burst: 30 }; // 50/s, one token per 20 ms
    const clock = { now: 1_000_000 };
    const admitted: number[] = [];
    let fromLeases = 0;
    const gates = Array.from(
      { length: 3 },
      () =>
        new LimiterGate(
          { charge: (_shard, charges) => shardStub(env, key).decide(charges, clock.now) },
          {
            decision: (_b, allowed, source) => {
              if (allowed) admitted.push(clock.now);
              if (source === "lease") fromLeases++;
            },
            error: () => {},
          },
          () => clock.now,
        ),
    );
    const random = seededRandom(7);
    const arrivals: number[] = [];
    for (let step = 0; step < 200; step++) {
      // Mostly a flood at ~3× the rate, with pauses long enough for the bucket to fill while a
      // lease is still out: the case where a lease could over-admit if held tokens were not counted.
      clock.now += random() < 0.1 ? 300 + Math.floor(random() * 600) : Math.floor(random() * 40);
      const gate = gates[Math.floor(random() * gates.length)] as LimiterGate;
      const n = 1 + Math.floor(random() * 12);
      for (let i = 0; i < n; i++) arrivals.push(clock.now);
      await Promise.allSettled(Array.from({ length: n }, () => gate.check("publish", key, limit)));
    }
    expect(fromLeases).toBeGreaterThan(0);
    admitted.sort((a, b) => a - b);
    for (let i = 0; i < admitted.length; i++) {
      for (let j = i; j < admitted.length; j++) {
        const bound = limit.burst + ((admitted[j] as number) - (admitted[i] as number)) * (limit.rate / limit.perMs);
        if (j - i + 1 > bound + 1e-9) throw new Error(`${j - i + 1} admitted in [${admitted[i]}, ${admitted[j]}]`);
      }
    }
    // What one bucket deciding every request itself would admit: leases may cost a little, not much.
    let ideal = fullBucket(limit, arrivals[0] as number);
    let idealAdmitted = 0;
    for (const at of arrivals) {
      const d = take(ideal, limit, at);
      ideal = d.state;
      if (d.allowed) idealAdmitted++;
    }
    expect(admitted.length).toBeLessThanOrEqual(idealAdmitted + limit.burst);
    expect(admitted.length).toBeGreaterThan(0.8 * idealAdmitted);
  });

  it("a lease stops being spent after LEASE_SPEND_MS", async () => {
    const clock = { now: 0 };
    let calls = 0;
    const gate = new LimiterGate(
      perKey(async (_k, _l, count, lease) => {
        calls++;
        return {
          granted: count,
          remaining: 100,
          retryAfterMs: 0,
          fullInMs: 0,
          ...(lease.want ? { lease: { id: `l${calls}`, tokens: 100 } } : {}),
        };
      }),
      { decision: () => {}, error: () => {} },
      () => clock.now,
    );
    const limit = hourly(1000);
    for (let i = 0; i < LEASE_MIN_DEMAND; i++) await gate.check("publish", "k", limit);
    expect(calls).toBe(LEASE_MIN_DEMAND); // no lease until the key is hot
    await gate.check("publish", "k", limit); // this call asks for and gets a lease
    const before = calls;
    for (let i = 0; i < 50; i++) await gate.check("publish", "k", limit);
    expect(calls).toBe(before);
    clock.now += LEASE_SPEND_MS;
    await gate.check("publish", "k", limit);
    expect(calls).toBe(before + 1);
  });
});

/** One isolate's gate on the real shard of `key`, on a fake clock, counting its shard calls and answers. */
function isolateOn(key: string, clock: { now: number }) {
  const seen = { calls: 0, admitted: 0, denied: 0, fromLease: 0 };
  const backend: BucketBackend = {
    charge: (_shard, charges) => {
      seen.calls++;
      return shardStub(env, key).decide(charges, clock.now);
    },
  };
  const gate = new LimiterGate(
    backend,
    {
      decision: (_b, allowed, source) => {
        if (allowed) seen.admitted++;
        else seen.denied++;
        if (source === "lease") seen.fromLease++;
      },
      error: () => {},
    },
    () => clock.now,
  );
  return { gate, seen };
}

describe("spare leases at low demand", () => {
  const spare = { want: 0, settle: [], spare: true };

  it("are granted only above the floor of half the burst, with a charge granted in full that asks for one", async () => {
    const l = hourly(20);
    const peekOf = (key: string) => shardStub(env, key).peek(key);
    const lease = async (key: string, count: number, request?: typeof spare) => {
      const [r] = await shardStub(env, key).decide([{ key, limit: l, count, ...(request ? { lease: request } : {}) }]);
      return r ?? null;
    };
    const [a, b, c, d] = keysInOneShard(4);
    // 19 left after the charge: the 9 above the floor of 10 go on lease, 10 stay in the bucket.
    expect((await lease(a as string, 1, spare))?.lease?.tokens).toBe(9);
    expect((await peekOf(a as string))?.tokens).toBeCloseTo(10, 1); // (the hourly refill adds a little)
    // At the floor: nothing more, neither for this isolate nor another one.
    expect((await lease(a as string, 1, spare))?.lease).toBeUndefined();
    expect((await peekOf(a as string))?.tokens).toBeCloseTo(9, 1);
    // 10 left after the charge is exactly the floor: no lease; 13 left: 3.
    expect((await lease(b as string, 10, spare))?.lease).toBeUndefined();
    expect((await lease(c as string, 7, spare))?.lease?.tokens).toBe(3);
    // A charge not granted in full, or that does not ask, gets none.
    expect((await lease(c as string, 20, spare))?.lease).toBeUndefined();
    expect((await lease(d as string, 1))?.lease).toBeUndefined();
    // A large bucket: a small lease, at most SPARE_LEASE_MAX.
    const [big] = keysInOneShard(1);
    const [r] = await shardStub(env, big as string).decide([
      { key: big as string, limit: hourly(1000), count: 1, lease: spare },
    ]);
    expect(r?.lease ?? null).toMatchObject({
      tokens: SPARE_LEASE_MAX,
      spendMs: SPARE_LEASE_SPEND_MS,
    });
  });

  it("answer a subject's next publishes in its isolate, and another isolate still gets at least half the burst", async () => {
    const key = `publish:${uniq()}`;
    const limit = hourly(20); // no refill: the burst is all there is
    const clock = { now: 1_000_000 };
    const one = isolateOn(key, clock);
    const other = isolateOn(key, clock);
    // A subject publishing now and then (one every 300 ms: never hot) through the first isolate.
    for (let i = 0; i < 10; i++) {
      await one.gate.check("publish", key, limit);
      clock.now += 300;
    }
    // The first charge takes 9 (of 19 left, those above half the burst) and spends them on the next
    // nine publishes: a subject's first publish already brings its spare lease.
    expect(one.seen).toMatchObject({ calls: 1, admitted: 10, fromLease: 9 });
    // The same subject through another isolate meanwhile: the half of the burst below the floor.
    for (let i = 0; i < 11; i++) {
      await other.gate.check("publish", key, limit).catch(() => {});
      clock.now += 300;
    }
    expect(other.seen.admitted).toBe(limit.burst / 2);
    expect(other.seen.denied).toBe(1);
    // And never more than the bucket: 20 in all.
    expect(one.seen.admitted + other.seen.admitted).toBe(limit.burst);
  });

  it("are asked for only by the publish bucket, from a key's first charge on", async () => {
    const clock = { now: 3_000_000 };
    const limit = hourly(20);
    // Reads (per client IP) and token issues: never a spare lease, however steady.
    for (const bucket of ["read", "token-issue", "subscribe"] as const) {
      const key = `${bucket}:${uniq()}`;
      const isolate = isolateOn(key, clock);
      for (let i = 0; i < 5; i++) {
        await isolate.gate.check(bucket, key, limit);
        clock.now += 300;
      }
      expect(isolate.seen).toMatchObject({ calls: 5, fromLease: 0 });
      expect((await shardStub(env, key).peek(key))?.tokens).toBeCloseTo(15, 1);
    }
    // A publisher seen again only after each lease's window: each charge settles the lease before
    // (its unused tokens back in the bucket) and takes a new one, so the bucket shows only what the
    // three publishes spent and what the newest lease holds.
    const key = `publish:${uniq()}`;
    const isolate = isolateOn(key, clock);
    for (let i = 0; i < 3; i++) {
      await isolate.gate.check("publish", key, limit);
      clock.now += SPARE_LEASE_SPEND_MS;
    }
    expect(isolate.seen).toMatchObject({ calls: 3, fromLease: 0 });
    // 17 after three publishes (and the hourly refill over those 30 s, 0.17), then the 7 above the
    // floor of 10 on the third charge's lease.
    expect((await shardStub(env, key).peek(key))?.tokens).toBeCloseTo(10, 0);
  });

  it("come with a subject's first publish: a cold crowd publishing three times each costs one call per subject", async () => {
    const limit: Limit = { rate: 50, perMs: 1000, burst: 100 }; // the shipped publish budget
    const clock = { now: 7_000_000 };
    const run = uniq("cold");
    const key = (k: number) => `publish:${run}.${k}`;
    const isolate = isolateOn(key(0), clock);
    // Every subject new to this isolate, publishing three times, one request at a time.
    for (let k = 0; k < 30; k++) {
      for (let i = 0; i < 3; i++) {
        // All on one shard object here (isolateOn's), which holds every key's bucket alike.
        await isolate.gate.check("publish", key(k), limit);
        clock.now += 20;
      }
    }
    expect(isolate.seen).toMatchObject({ calls: 30, admitted: 90, fromLease: 60, denied: 0 });
  });

  it("are settled with the isolate's next call to their shard, made for another key: no call of their own", async () => {
    const [a, b] = keysInOneShard(2) as [string, string];
    const limit: Limit = { rate: 20, perMs: 86_400_000, burst: 20 }; // next to no refill over the window
    const clock = { now: 2_000_000 };
    const isolate = isolateOn(a, clock);
    await isolate.gate.check("publish", a, limit); // 1 admitted, 9 on lease, 10 in the bucket
    await isolate.gate.check("publish", a, limit); // from the lease: 8 left on it
    await isolate.gate.check("publish", a, limit); // from the lease: 7 left on it
    expect(isolate.seen).toMatchObject({ calls: 1, fromLease: 2 });
    expect((await shardStub(env, a).peek(a))?.tokens).toBeCloseTo(10, 1);
    // The lease's window passes with no more publishes of `a`; a publish of `b` calls the shard.
    clock.now += SPARE_LEASE_SPEND_MS;
    await isolate.gate.check("publish", b, limit);
    expect(isolate.seen.calls).toBe(2);
    // The 7 unused came back with that call, long before the lease would have ended in the object.
    expect((await shardStub(env, a).peek(a))?.tokens).toBeCloseTo(17, 1); // (the refill adds next to nothing)
    // Settled once: the next call carries nothing for `a`.
    await isolate.gate.check("publish", b, limit);
    expect((await shardStub(env, a).peek(a))?.tokens).toBeCloseTo(17, 1);
    // A settle that arrives for a key whose bucket is gone (full again, deleted) creates nothing.
    const [gone] = keysInOneShard(1, "publish:") as [string];
    const settle = { want: 0, settle: [{ id: "ended", unused: 5 }] };
    await shardStub(env, gone).decide([{ key: gone, limit, count: 0, lease: settle, settleOnly: true }]);
    expect(await shardStub(env, gone).peek(gone)).toBeNull();
  });

  it("a call settles every lease whose window has passed, 64 keys a call, and none still being spent", async () => {
    const [first, second, ...crowd] = keysInOneShard(102) as [string, string, ...string[]];
    const early = crowd.slice(0, 70);
    const late = crowd.slice(70);
    const limit: Limit = { rate: 20, perMs: 86_400_000, burst: 20 }; // next to no refill over the test
    const clock = { now: 3_000_000 };
    const isolate = isolateOn(first, clock);
    for (const k of early) await isolate.gate.check("publish", k, limit); // each: 1 admitted, 9 on lease
    clock.now += SPARE_LEASE_SPEND_MS / 2;
    for (const k of late) await isolate.gate.check("publish", k, limit);
    clock.now += SPARE_LEASE_SPEND_MS / 2; // the early leases' windows have passed, the late ones' not
    await isolate.gate.check("publish", first, limit); // carries 64 of the early keys' settles
    await isolate.gate.check("publish", second, limit); // and the other 6
    expect(isolate.seen.calls).toBe(early.length + late.length + 2);
    const tokens = async (keys: string[]) =>
      Promise.all(keys.map(async (k) => Math.round((await shardStub(env, k).peek(k))?.tokens ?? Number.NaN)));
    expect(await tokens(early)).toEqual(early.map(() => 19)); // the 9 unused came back
    expect(await tokens(late)).toEqual(late.map(() => 10)); // still on lease, still being spent
  });

  it("a key holding a spare lease and a hot one settles the hot one when its window ends", () => {
    // Two charges of one key in flight together can bring both: the spare one spent for 10 s, the hot
    // one for 1 s. The hot one must go back with the next call after its window, not wait behind the
    // spare one.
    const leases = new IsolateLeases();
    const home = { shard: "3", key: "publish:k", limit: { rate: 20, perMs: 86_400_000, burst: 20 } };
    const t0 = 5_000_000;
    leases.hold("k", { id: "spare", tokens: 9, spendMs: SPARE_LEASE_SPEND_MS }, t0, 10, t0, home);
    leases.hold("k", { id: "hot", tokens: 4 }, t0 + 100, 6, t0, home);
    expect(leases.spend("k", t0 + 200)).not.toBeNull(); // the hot one, ending first, is spent first
    expect(leases.settlesFor("3", new Set(), t0 + 500)).toEqual([]);
    expect(leases.settlesFor("3", new Set(), t0 + 1_200)).toEqual([
      { id: "k", home, settle: [{ id: "hot", unused: 3 }] },
    ]);
    expect(leases.settlesFor("3", new Set(), t0 + SPARE_LEASE_SPEND_MS)).toEqual([
      { id: "k", home, settle: [{ id: "spare", unused: 9 }] },
    ]);
  });
});

describe("a crowd at low demand", () => {
  it("costs at most 100 shard calls per 1,000 publishes once each subject has been seen, and stays within every bucket", async () => {
    const limit: Limit = { rate: 50, perMs: 1000, burst: 100 }; // the shipped publish budget
    const clock = { now: 5_000_000 };
    let calls = 0;
    const gate = new LimiterGate(
      {
        charge: (shard, charges) => {
          calls++;
          return limiterShardStub(env, shardName(shard)).decide(charges, clock.now);
        },
      },
      { decision: () => {}, error: () => {} },
      () => clock.now,
    );
    // 60 subjects publishing once, twice or three times a second, for 40 s, one request at a time.
    const run = uniq("crowd");
    const subjects = Array.from({ length: 60 }, (_, k) => ({
      key: `publish:${run}.${k}`,
      everyMs: 1000 / (1 + (k % 3)),
    }));
    const next = subjects.map((s, k) => 5_000_000 + ((k * 37) % Math.round(s.everyMs)));
    let publishes = 0;
    let denied = 0;
    let callsAtWarm = -1;
    let publishesAtWarm = 0;
    for (;;) {
      let k = 0;
      for (let j = 1; j < next.length; j++) if ((next[j] as number) < (next[k] as number)) k = j;
      clock.now = next[k] as number;
      if (clock.now >= 5_040_000) break;
      if (callsAtWarm < 0 && clock.now >= 5_010_000) {
        callsAtWarm = calls;
        publishesAtWarm = publishes;
      }
      const s = subjects[k] as (typeof subjects)[number];
      await gate.check("publish", s.key, limit).catch(() => denied++);
      publishes++;
      next[k] = clock.now + s.everyMs;
    }
    expect(denied).toBe(0); // below its rate, no subject is ever refused
    const perThousand = (1000 * (calls - callsAtWarm)) / (publishes - publishesAtWarm);
    expect(perThousand).toBeLessThanOrEqual(100);
  });
});

describe("leases over HTTP", () => {
  it("waves of concurrent publishes from one subject: exactly the burst gets through, mostly without object calls", async () => {
    const e = envWith({ PUBLISH_RATE: "100/h", PUBLISH_BURST: "" });
    const { access_token: t } = await mint({ sub: uniq("hot"), channels: ["public:lease.*"] });
    const ch = `public:lease.${uniq()}`;
    const statuses: number[] = [];
    for (let wave = 0; wave < 10; wave++) {
      const res = await Promise.all(
        Array.from({ length: 30 }, () =>
          callAndWait(
            `/v1/publish/${ch}`,
            { method: "POST", headers: { authorization: `Bearer ${t}` }, body: "{}" },
            e,
          ),
        ),
      );
      statuses.push(...res.map((r) => r.status));
    }
    expect(statuses.filter((s) => s === 200)).toHaveLength(100);
    expect(statuses.filter((s) => s === 429)).toHaveLength(200);
    const metrics = await (await callAndWait("/metrics", { headers: adminHeaders() }, e)).text();
    const hits = Number(/floodgate_rate_limit_lease_hits_total\{bucket="publish"\} (\d+)/.exec(metrics)?.[1]);
    expect(hits).toBeGreaterThan(0);
    const stats = await (await callAndWait(`/v1/channels/${ch}/stats`, { headers: adminHeaders() }, e)).json();
    expect(stats).toMatchObject({ last_seq: 100 });
  });
});
