/**
 * What one sampler visit decides (functions/sampler-visit.ts), without a Worker: which rate wins,
 * whether KV is written, whether the channel stays throttled, whether it is skipped, and whether it
 * fits the run's KV budget. test/worker/sampler/cron-sweep.test.ts runs the same decisions end to end in workerd.
 */
import { describe, expect, it } from "vitest";
import type { SamplerTarget } from "../../functions/sampler";
import {
  decideVisit,
  globalRunningRate,
  KV_OPERATIONS_PER_RUN,
  KV_OPERATIONS_PER_SHARD_VISIT,
  KV_OPERATIONS_PER_VISIT,
  KvBudget,
  kvOperations,
  shardDefaultRate,
  type TakenPeriod,
  type VisitOutcome,
  visitTarget,
} from "../../functions/sampler-visit";

const tenPerSecond: SamplerTarget = { kind: "messages", perSecond: 10 };
const START = 1_000_000;

/** A period of `seconds` in which `offered` messages arrived, the fast loop silent unless given. */
function period(offered: number, seconds: number, extra: Partial<TakenPeriod> = {}): TakenPeriod {
  return {
    counts: { delivered: offered, dropped: 0, elapsedMs: seconds * 1000, occupancy: 1 },
    startedAt: START,
    fastRate: null,
    fastDecidedAt: null,
    ...extra,
  };
}

describe("which rate wins", () => {
  it("the sweep applies the law to its period when the fast loop did not decide during it", () => {
    // 40 msg/s offered against 10/s: drop 1 − 10/40.
    const d = decideVisit({ target: tenPerSecond, period: period(2400, 60), storedRate: 0, defaultRate: 0 });
    expect(d.decidedBy).toBe("sweep");
    expect(d.newRate).toBe(0.75);
    expect(d.write).toBe(true);
    expect(d.offeredRate).toBe(40);
    expect(d.allowedRate).toBe(10);
  });

  it("the fast loop's rate wins when it decided during the period, even against the sweep's own counts", () => {
    const fast = period(2400, 60, { fastRate: 0.123456, fastDecidedAt: START + 1 });
    const d = decideVisit({ target: tenPerSecond, period: fast, storedRate: 0, defaultRate: 0 });
    expect(d.decidedBy).toBe("fast loop");
    expect(d.newRate).toBe(0.1235); // stored with four decimals
  });

  it("a fast-loop decision from before the period began is stale: the sweep decides", () => {
    for (const fastDecidedAt of [START, START - 5000, null]) {
      const stale = period(2400, 60, { fastRate: 0.2, fastDecidedAt });
      const d = decideVisit({ target: tenPerSecond, period: stale, storedRate: 0, defaultRate: 0 });
      expect(d.decidedBy).toBe("sweep");
      expect(d.newRate).toBe(0.75);
    }
  });

  it("a fast loop that decided but has no rate leaves the decision to the sweep", () => {
    const none = period(2400, 60, { fastRate: null, fastDecidedAt: START + 1 });
    expect(decideVisit({ target: tenPerSecond, period: none, storedRate: 0, defaultRate: 0 }).decidedBy).toBe("sweep");
  });

  it("a channel without its own key runs at the global rate: the law's 'current' is the global one", () => {
    // A period with no length carries no information, so the current rate stays.
    const empty = period(0, 0);
    const d = decideVisit({ target: tenPerSecond, period: empty, storedRate: null, defaultRate: 0.3 });
    expect(d.currentRate).toBe(0.3);
    expect(d.newRate).toBe(0.3);
    expect(d.write).toBe(false);
    expect(d.offeredRate).toBeNull();
  });

  it("a delivery budget is split across the subscribers, and unlimited with none", () => {
    const budget: SamplerTarget = { kind: "deliveries", perSecond: 40 };
    const crowd = period(1200, 60);
    crowd.counts.occupancy = 4; // 40 deliveries/s over 4 subscribers: 10 msg/s of the 20 offered
    const d = decideVisit({ target: budget, period: crowd, storedRate: 0, defaultRate: 0 });
    expect(d.allowedRate).toBe(10);
    expect(d.newRate).toBe(0.5);
    crowd.counts.occupancy = 0;
    const alone = decideVisit({ target: budget, period: crowd, storedRate: 0, defaultRate: 0 });
    expect(alone.allowedRate).toBeNull();
    expect(alone.newRate).toBe(0);
  });
});

describe("whether the key is written", () => {
  it("a new channel under its target that already runs at 0 gets no key", () => {
    const d = decideVisit({ target: tenPerSecond, period: period(60, 60), storedRate: null, defaultRate: 0 });
    expect(d.write).toBe(false);
    expect(d.newRate).toBe(0);
  });

  it("a new channel under its target that the global rate would throttle gets its own 0", () => {
    const d = decideVisit({ target: tenPerSecond, period: period(60, 60), storedRate: null, defaultRate: 0.4 });
    expect(d.write).toBe(true);
    expect(d.newRate).toBe(0);
  });

  it("a new overloaded channel whose rate is already the global one writes nothing", () => {
    const d = decideVisit({ target: tenPerSecond, period: period(2400, 60), storedRate: null, defaultRate: 0.75 });
    expect(d.write).toBe(false);
    expect(d.newRate).toBe(0.75);
  });

  it("a change of the pass fraction below 1% is skipped and the stored rate stays in force", () => {
    // Stored 0.75 passes 25%; 2410 offered over 60 s → drop 1 − 600/2410 ≈ 0.751, a 0.4% move.
    const d = decideVisit({ target: tenPerSecond, period: period(2410, 60), storedRate: 0.75, defaultRate: 0 });
    expect(d.write).toBe(false);
    expect(d.newRate).toBe(0.75);
  });

  it("a change of 1% or more of the pass fraction is written", () => {
    // 3000 offered over 60 s → drop 0.8: the pass fraction falls from 25% to 20%.
    const d = decideVisit({ target: tenPerSecond, period: period(3000, 60), storedRate: 0.75, defaultRate: 0 });
    expect(d.write).toBe(true);
    expect(d.newRate).toBe(0.8);
  });

  it("the stored key wins over the global rate for the decision to change the key", () => {
    // Same next rate as the global one, but the channel's own key says 0: the key must go, so the
    // channel runs at the global rate (deleted rather than written with the same value).
    const d = decideVisit({ target: tenPerSecond, period: period(2400, 60), storedRate: 0, defaultRate: 0.75 });
    expect(d.currentRate).toBe(0);
    expect(d).toMatchObject({ write: false, deleteKey: true, newRate: 0.75 });
  });

  it("a new rate that is not the default is written, never deleted", () => {
    const d = decideVisit({ target: tenPerSecond, period: period(3000, 60), storedRate: 0.75, defaultRate: 0.5 });
    expect(d).toMatchObject({ write: true, deleteKey: false, newRate: 0.8 });
    const fresh = decideVisit({ target: tenPerSecond, period: period(60, 60), storedRate: null, defaultRate: 0.4 });
    expect(fresh).toMatchObject({ write: true, deleteKey: false, newRate: 0 });
  });
});

describe("releasing an idle channel", () => {
  it("a throttled channel with no traffic in its period is released to 0, its key deleted, and no longer throttled", () => {
    const d = decideVisit({ target: tenPerSecond, period: period(0, 60), storedRate: 0.9, defaultRate: 0 });
    expect(d.newRate).toBe(0);
    expect(d.write).toBe(false);
    expect(d.deleteKey).toBe(true);
    expect(d.throttled).toBe(false);
  });

  it("released over a global rate, the channel keeps its own 0", () => {
    const d = decideVisit({ target: tenPerSecond, period: period(0, 60), storedRate: 0.9, defaultRate: 0.3 });
    expect(d).toMatchObject({ newRate: 0, write: true, deleteKey: false, throttled: false });
  });

  it("a key left holding the default is deleted even when the rate does not change", () => {
    const d = decideVisit({ target: tenPerSecond, period: period(0, 60), storedRate: 0, defaultRate: 0 });
    expect(d).toMatchObject({ newRate: 0, write: false, deleteKey: true });
    const shard = decideVisit({ target: tenPerSecond, period: period(2400, 60), storedRate: 0.75, defaultRate: 0.75 });
    expect(shard).toMatchObject({ newRate: 0.75, write: false, deleteKey: true });
  });

  it("a channel still dropping stays throttled, so the registry visits it when it goes quiet", () => {
    const d = decideVisit({ target: tenPerSecond, period: period(2400, 60), storedRate: 0.75, defaultRate: 0 });
    expect(d.write).toBe(false);
    expect(d.throttled).toBe(true);
  });

  it("a skipped small change keeps the channel throttled at its stored rate", () => {
    const d = decideVisit({ target: tenPerSecond, period: period(2410, 60), storedRate: 0.75, defaultRate: 0 });
    expect(d.throttled).toBe(true);
  });
});

describe("which channels are visited", () => {
  it("the analytics channel is skipped even when a target matches it", () => {
    expect(visitTarget(true, tenPerSecond)).toEqual({ skipped: "analytics channel" });
  });

  it("a channel without a target is skipped; one with a target is sampled against it", () => {
    expect(visitTarget(false, null)).toEqual({ skipped: "no target" });
    expect(visitTarget(false, tenPerSecond)).toEqual({ target: tenPerSecond });
  });

  it("the global key's rate is used when it holds one, 0 included; else the fallback", () => {
    expect(globalRunningRate(0.2, 0.5)).toBe(0.2);
    expect(globalRunningRate(0, 0.5)).toBe(0);
    expect(globalRunningRate(null, 0.5)).toBe(0.5);
  });

  it("a shard without its own key runs at its channel's key, 0 included; else the global rate", () => {
    expect(shardDefaultRate(0.6, 0.2)).toBe(0.6);
    expect(shardDefaultRate(0, 0.2)).toBe(0);
    expect(shardDefaultRate(null, 0.2)).toBe(0.2);
  });
});

describe("the run's KV budget", () => {
  it("counts a read per sampled visit, a write when it wrote, nothing for a skipped one", () => {
    expect(kvOperations({ skipped: "no target" })).toBe(0);
    expect(kvOperations({ written: false })).toBe(1);
    expect(kvOperations({ written: true })).toBe(2);
    expect(kvOperations({ written: false, deleted: true })).toBe(2);
  });

  it("defers a visit that would not fit, and fits one again once others give back what they did not use", () => {
    const kv = new KvBudget(2 * KV_OPERATIONS_PER_VISIT + 1);
    const settle = (visit: VisitOutcome) => kv.settle(KV_OPERATIONS_PER_VISIT, kvOperations(visit));
    expect(kv.reserveVisit()).toBe(true);
    expect(kv.reserveVisit()).toBe(true);
    expect(kv.reserveVisit()).toBe(false); // one operation left: a read and a write would not fit
    settle({ written: false }); // gave back its unused write: 2 left
    expect(kv.reserveVisit()).toBe(true);
    expect(kv.reserveVisit()).toBe(false);
    settle({ skipped: "analytics channel" });
    expect(kv.reserveVisit()).toBe(true);
    settle({ written: true }); // used all it reserved
    expect(kv.reserveVisit()).toBe(false);
  });

  it("a shard's visit reserves the read of its channel's key too", () => {
    const kv = new KvBudget(KV_OPERATIONS_PER_SHARD_VISIT + 1);
    expect(kv.reserveVisit(KV_OPERATIONS_PER_SHARD_VISIT)).toBe(true);
    expect(kv.reserveVisit(KV_OPERATIONS_PER_SHARD_VISIT)).toBe(false);
    kv.settle(KV_OPERATIONS_PER_SHARD_VISIT, 1); // its channel's key was read already this run, nothing written
    expect(kv.reserveVisit(KV_OPERATIONS_PER_SHARD_VISIT)).toBe(true);
  });

  it("a run's default budget leaves the global key's read out of the visits", () => {
    const kv = new KvBudget();
    let visits = 0;
    while (kv.reserveVisit()) visits++;
    expect(visits).toBe(Math.floor((KV_OPERATIONS_PER_RUN - 1) / KV_OPERATIONS_PER_VISIT));
  });
});
