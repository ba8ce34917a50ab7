/**
 * Token leases: a hot isolate spends tokens it took from the bucket ahead of time, with no object
 * call per request, and the bucket's bound still holds for every interval.
 */
import { evictDurableObject } from "cloudflare:test";
import { env } from "cloudflare:workers";
import { describe, expect, it } from "vitest";
import { LEASE_SPEND_MS, LEASE_TTL_MS } from "../src/bucket-charge";
import { LEASE_MIN_DEMAND } from "../src/isolate-leases";
import { LimiterGate } from "../src/limiter-gate";
import { shardStub } from "../src/limiter-shard";
import type { Limit } from "../src/limits";
import { fullBucket, take } from "../src/token-bucket";
import { adminHeaders, callAndWait, envWith, mint, perKey, uniq } from "./helpers";
import { seededRandom } from "./seeded-random";

const stub = (key: string) => env.RATE_LIMITER.get(env.RATE_LIMITER.idFromName(key));
const hourly = (n: number): Limit => ({ rate: n, perMs: 3_600_000, burst: n }); // no refill in a test

describe("RateLimiter leases", () => {
  it("are granted only when the whole batch is, at most half of what is left, and taken from the bucket", async () => {
    const s = stub(`publish:${uniq()}`);
    const l = hourly(100);
    const first = await s.chargeMany(l, 10, 0, { want: 80, settle: [] });
    expect(first).toMatchObject({ granted: 10, remaining: 45, lease: { tokens: 45 } });
    expect((await s.peek())?.tokens).toBeCloseTo(45, 6);
    // 50 asked, 45 left: 45 granted, no lease for a batch that was not granted in full.
    const second = await s.chargeMany(l, 50, 0, { want: 80, settle: [] });
    expect(second.granted).toBe(45);
    expect(second.lease).toBeUndefined();
    // Without `want` nothing is leased.
    const s2 = stub(`publish:${uniq()}`);
    expect((await s2.chargeMany(l, 1, 0)).lease).toBeUndefined();
  });

  it("leased tokens count as in the bucket until settled; unused ones come back once", async () => {
    const s = stub(`publish:${uniq()}`);
    const l: Limit = { rate: 10, perMs: 1000, burst: 10 }; // 10/s
    const { lease } = await s.chargeMany(l, 2, 0, { want: 8, settle: [] });
    expect(lease?.tokens).toBe(4); // half of the 8 left
    // 1 s later the bucket alone would be full again; with 4 on lease it refills to 6 only.
    const held = await s.chargeMany(l, 0, 1000, { want: 0, settle: [] });
    expect(held.remaining).toBe(6);
    // The isolate used 1 of the 4: the 3 unused come back (to 9), and settling again changes nothing.
    const id = lease?.id ?? "";
    expect((await s.chargeMany(l, 0, 1000, { want: 0, settle: [{ id, unused: 3 }] })).remaining).toBe(9);
    expect((await s.chargeMany(l, 0, 1000, { want: 0, settle: [{ id, unused: 3 }] })).remaining).toBe(9);
    // A settle never returns more than the lease held.
    const again = await s.chargeMany(l, 0, 1000, { want: 8, settle: [] });
    const other = again.lease?.id ?? "";
    const after = await s.chargeMany(l, 0, 1000, { want: 0, settle: [{ id: other, unused: 1000 }] });
    expect(after.remaining).toBe(9);
  });

  it("an evicted object still counts its open leases (a new instance reads them back)", async () => {
    const key = `publish:${uniq()}`;
    const l: Limit = { rate: 10, perMs: 1000, burst: 10 };
    const { lease } = await stub(key).chargeMany(l, 2, 0, { want: 8, settle: [] });
    expect(lease?.tokens).toBe(4);
    await evictDurableObject(stub(key));
    // As before eviction: 1 s later the bucket refills to 6, not 10, while 4 are on lease.
    expect((await stub(key).chargeMany(l, 0, 1000, { want: 0, settle: [] })).remaining).toBe(6);
    expect(
      (await stub(key).chargeMany(l, 0, 1000, { want: 0, settle: [{ id: lease?.id ?? "", unused: 4 }] })).remaining,
    ).toBe(10);
  });

  it("a lease nobody settles ends after LEASE_TTL_MS, its tokens counted as spent", async () => {
    const s = stub(`publish:${uniq()}`);
    const l = hourly(100);
    const { lease } = await s.chargeMany(l, 0, 0, { want: 30, settle: [] });
    expect(lease?.tokens).toBe(30);
    const later = await s.chargeMany(l, 0, LEASE_TTL_MS, { want: 0, settle: [{ id: lease?.id ?? "", unused: 30 }] });
    expect(later.remaining).toBe(70); // too late to settle: the 30 are gone
  });

  it("when every token is on lease, a denial's Retry-After waits for the first lease to end", async () => {
    const s = stub(`publish:${uniq()}`);
    const l: Limit = { rate: 1, perMs: 1000, burst: 2 };
    const { lease } = await s.chargeMany(l, 0, 0, { want: 1, settle: [] }); // 1 of 2
    expect(lease?.tokens).toBe(1);
    await s.chargeMany(l, 1, 0); // the other one
    const denied = await s.chargeMany(l, 1, 100);
    expect(denied.granted).toBe(0);
    // Without the lease the next token would be back at 1,000 ms; with it the bucket caps at 1 token
    // and refills that one in time, so the wait is the refill, not the lease.
    expect(denied.retryAfterMs).toBe(900);
    const all = stub(`publish:${uniq()}`);
    const tight: Limit = { rate: 1, perMs: 1000, burst: 1 };
    await all.chargeMany(tight, 0, 0, { want: 1, settle: [] }); // nothing: half of 1 is 0
    expect((await all.chargeMany(tight, 0, 0, { want: 1, settle: [] })).lease).toBeUndefined();
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
