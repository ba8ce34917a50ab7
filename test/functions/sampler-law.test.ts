/**
 * The sampler's control law and its guarantees, proved on a seeded simulation with one period of
 * actuation lag (test/support/loop-simulation.ts), and the naive ratio law shown failing the same
 * checks; with priority traffic, the law's solution checked property-based (fast-check) too.
 */
import fc from "fast-check";
import { describe, expect, it } from "vitest";
import {
  allowedMessageRate,
  feedForwardRate,
  isMeaningfulChange,
  naiveRatioRate,
  nextDropRate,
  roundRate,
  type SamplerTarget,
} from "../../functions/sampler";
import { Thinning } from "../../functions/thinning";
import {
  type Law,
  PRODUCTION_TIMING,
  simulate,
  simulateTiming,
  summarise,
  summariseTiming,
  timingScenarios,
  traces,
} from "../support/loop-simulation";
import { RUNS } from "../support/property-inputs";
import { seededRandom } from "../support/seeded-random";

const T = 20; // messages per second

const PERIOD_S = 60;

const target: SamplerTarget = { kind: "messages", perSecond: T };

const perPeriod = T * PERIOD_S;

function run(name: string, law: Law = nextDropRate, mode: "random" | "thinning" = "random", seed = 1) {
  const { trace, stepAt } = traces(T)[name] as { trace: number[]; stepAt: number };
  const results = simulate({ trace, target, law, periodS: PERIOD_S, lagPeriods: 1, mode, random: seededRandom(seed) });
  return { results, summary: summarise(results, perPeriod, { stepAt, window: 20, periodS: PERIOD_S }), stepAt };
}

describe("the law", () => {
  it("is 0 whenever offered ≤ target, and 1 − T/A above it", () => {
    const counts = (n: number) => ({ delivered: n, dropped: 0, elapsedMs: 60_000, occupancy: 3 });
    expect(nextDropRate(counts(0), 0.7, target)).toBe(0);
    expect(nextDropRate(counts(T * 60), 0.7, target)).toBe(0);
    expect(nextDropRate(counts(T * 60 - 1), 0.7, target)).toBe(0);
    expect(nextDropRate({ delivered: T * 60, dropped: 3 * T * 60, elapsedMs: 60_000, occupancy: 1 }, 0, target)).toBe(
      0.75,
    );
  });

  it("uses the real elapsed time: a late run measures a longer period", () => {
    const c = { delivered: 2400, dropped: 0, elapsedMs: 120_000, occupancy: 1 }; // 20/s, not 40/s
    expect(nextDropRate(c, 0, target)).toBe(0);
    expect(nextDropRate({ ...c, elapsedMs: 60_000 }, 0, target)).toBe(0.5);
  });

  it("keeps the current rate when the period has no length", () => {
    expect(nextDropRate({ delivered: 5, dropped: 5, elapsedMs: 0, occupancy: 1 }, 0.3, target)).toBe(0.3);
  });

  it("stays in [0,1) for any input, and below 1 whenever the target is positive", () => {
    const random = seededRandom(3);
    for (let i = 0; i < 2000; i++) {
      const counts = {
        delivered: Math.floor(random() * 1e6),
        dropped: Math.floor(random() * 1e6),
        elapsedMs: Math.floor(random() * 120_000),
        occupancy: Math.floor(random() * 1000),
      };
      const t: SamplerTarget = { kind: random() < 0.5 ? "messages" : "deliveries", perSecond: 0.01 + random() * 1000 };
      const p = nextDropRate(counts, random() * 2 - 0.5, t);
      expect(p).toBeGreaterThanOrEqual(0);
      expect(p).toBeLessThan(1);
      expect(roundRate(p)).toBeLessThan(1);
    }
    expect(feedForwardRate(100, 0)).toBe(1); // a zero target drops everything, by definition
  });

  it("splits a delivery budget across the subscribers", () => {
    const budget: SamplerTarget = { kind: "deliveries", perSecond: 5000 };
    expect(allowedMessageRate(budget, 50)).toBe(100);
    expect(allowedMessageRate(budget, 0)).toBe(Number.POSITIVE_INFINITY);
    // 200 msg/s offered to 50 subscribers against 5000 deliveries/s: keep half.
    expect(nextDropRate({ delivered: 12_000, dropped: 0, elapsedMs: 60_000, occupancy: 50 }, 0, budget)).toBe(0.5);
    // Nobody listening: nothing to save by dropping.
    expect(nextDropRate({ delivered: 12_000, dropped: 0, elapsedMs: 60_000, occupancy: 0 }, 0.5, budget)).toBe(0);
  });

  it("writes only meaningful changes, but always a release to 0 and a start", () => {
    expect(isMeaningfulChange(null, 0)).toBe(false);
    expect(isMeaningfulChange(0, 0.0001)).toBe(true);
    expect(isMeaningfulChange(0.5, 0)).toBe(true);
    expect(isMeaningfulChange(0.5, 0.502)).toBe(false); // pass fraction 0.5 → 0.498: 0.4%
    expect(isMeaningfulChange(0.5, 0.51)).toBe(true); // 2%
    expect(isMeaningfulChange(0.99, 0.9905)).toBe(true); // pass 0.01 → 0.0095: 5%
  });
});

describe("guarantees in simulation (T = 20 msg/s, 60 s periods, one period of actuation lag)", () => {
  for (const mode of ["random", "thinning"] as const) {
    it(`[${mode}] steady state: mean delivered within ±2% of target over 20 periods at constant overload`, () => {
      const { summary } = run("constant", nextDropRate, mode);
      expect(summary.steadyStateError).toBeLessThanOrEqual(0.02);
    });

    it(`[${mode}] a 4× step settles within ±10% in at most 2 periods, lag included`, () => {
      const { summary } = run("4x step", nextDropRate, mode);
      expect(summary.settlingPeriods).not.toBeNull();
      expect(summary.settlingPeriods).toBeLessThanOrEqual(2);
    });

    it(`[${mode}] never a period with nothing delivered while offered > target, rate always in [0,1]`, () => {
      for (const name of Object.keys(traces(T))) {
        const { results, summary } = run(name, nextDropRate, mode);
        expect(summary.starvedPeriods).toBe(0);
        for (const r of results) {
          expect(r.writtenRate).toBeGreaterThanOrEqual(0);
          expect(r.writtenRate).toBeLessThanOrEqual(1);
        }
      }
    });

    it(`[${mode}] back to 0 at the first sample after the load falls below target`, () => {
      const { results, stepAt } = run("fall below target", nextDropRate, mode);
      expect(results[stepAt - 1]?.writtenRate).toBeGreaterThan(0.7);
      expect(results[stepAt]?.writtenRate).toBe(0);
    });
  }

  it("thinning cuts per-period dispersion about 3× at the same long-run rate", () => {
    const random = run("constant", nextDropRate, "random");
    const thin = run("constant", nextDropRate, "thinning");
    expect(thin.summary.steadyStateError).toBeLessThanOrEqual(0.005);
    expect(random.summary.dispersion / Math.max(thin.summary.dispersion, 1e-9)).toBeGreaterThanOrEqual(3);
  });

  it("at constant load the rate is written once, not every period", () => {
    const { summary } = run("constant", nextDropRate, "thinning");
    expect(summary.kvWritesPerHour).toBeLessThanOrEqual(2);
  });
});

describe("the naive ratio law fails the same checks (why we do not use it)", () => {
  it("never settles after a 4× step with one period of lag, and misses the steady-state band", () => {
    const naive = run("4x step", naiveRatioRate);
    const ours = run("4x step", nextDropRate);
    expect(ours.summary.settlingPeriods).toBeLessThanOrEqual(2);
    expect(naive.summary.settlingPeriods === null || naive.summary.settlingPeriods > 10).toBe(true);
    const constant = run("constant", naiveRatioRate);
    expect(constant.summary.steadyStateError).toBeGreaterThan(0.02);
    // It rings: delivered swings far above and below the target, period after period.
    const tail = constant.results.slice(-20).map((r) => r.delivered / perPeriod);
    expect(Math.max(...tail)).toBeGreaterThan(1.5);
    expect(Math.min(...tail)).toBeLessThan(0.5);
  });
});

describe("thinning", () => {
  it("passes exactly the pass fraction, to within one message, in any run", () => {
    const t = new Thinning();
    for (const rate of [0, 0.1, 0.25, 0.5, 0.875, 0.999, 1]) {
      let passed = 0;
      for (let i = 1; i <= 1000; i++) {
        if (!t.drop(`c${rate}`, rate)) passed++;
        expect(Math.abs(passed - i * (1 - rate))).toBeLessThanOrEqual(1);
      }
    }
  });

  it("a flood of new channel names forgets only the coldest channels: a busy channel stays exact", () => {
    const t = new Thinning(10);
    let passed = 0;
    for (let i = 1; i <= 1000; i++) {
      if (!t.drop("busy", 0.9)) passed++;
      for (let k = 0; k < 5; k++) t.drop(`once-${i}-${k}`, 0.5); // twice the cap every four busy messages
      expect(Math.abs(passed - i * 0.1)).toBeLessThanOrEqual(1);
    }
  });
});

describe("two loops at production timing (Cron 60 s, KV lag 60 s, fast period 5 s)", () => {
  const P = PRODUCTION_TIMING;
  const phases = Array.from({ length: 12 }, (_, k) => k / 12);
  function timing(name: string, fastPeriodS: number | null) {
    const sc = timingScenarios(T)[name] as ReturnType<typeof timingScenarios>[string];
    return phases.map((phase) =>
      summariseTiming(simulateTiming({ ...P, load: sc.load, target, fastPeriodS, phase }), T, sc),
    );
  }
  /** Two fast periods, plus the time the rate takes to reach the isolates (their next answer). */
  const twoFastPeriods = 2 * P.fastPeriodS + P.pushDelayS;

  it("holds a sustained 4× step within two fast periods at every phase; the Cron-only loop takes minutes", () => {
    for (const r of timing("sustained 4× step", P.fastPeriodS)) {
      expect(r.holdS).not.toBeNull();
      expect(r.holdS as number).toBeLessThanOrEqual(twoFastPeriods);
      expect(r.overDropped).toBe(0);
    }
    for (const r of timing("sustained 4× step", null)) expect(r.holdS as number).toBeGreaterThan(P.cronPeriodS);
  });

  it("a 30 s surge: held within two fast periods and released as fast; the Cron-only loop never holds it", () => {
    const twoTier = timing("30 s surge to 4×", P.fastPeriodS);
    const today = timing("30 s surge to 4×", null);
    for (const [i, r] of twoTier.entries()) {
      expect(r.holdS as number).toBeLessThanOrEqual(twoFastPeriods);
      expect(r.releaseS as number).toBeLessThanOrEqual(twoFastPeriods);
      // It lets through under a quarter of what the Cron-only loop does.
      expect(r.excess).toBeLessThan(0.25 * (today[i] as { excess: number }).excess);
    }
    for (const r of today) {
      expect(r.holdS).toBeNull();
      // Its late rate then over-drops the normal load that follows, for over a minute.
      expect(r.releaseS as number).toBeGreaterThan(P.cronPeriodS);
    }
  });
});

/**
 * Priority messages (docs/throttling.md, "Priority messages"): never dropped, counted as delivered;
 * the law solves for the drop rate of the rest.
 */
describe("the law with priority traffic", () => {
  it("drops the rest at 1 − (T − P)/N, 0 at or below the target, 1 once priority alone reaches it", () => {
    // A = 40/s, P = 12/s, N = 28/s against T = 20/s: (20 − 12) / 28 of the rest passes.
    expect(feedForwardRate(40, 20, 12)).toBeCloseTo(1 - 8 / 28, 12);
    expect(feedForwardRate(40, 20, 0)).toBe(feedForwardRate(40, 20));
    expect(feedForwardRate(20, 20, 12)).toBe(0);
    expect(feedForwardRate(15, 20, 15)).toBe(0);
    expect(feedForwardRate(40, 20, 20)).toBe(1);
    expect(feedForwardRate(40, 20, 30)).toBe(1);
    expect(feedForwardRate(30, 20, 30)).toBe(1); // only priority, above the target: the rest, when it comes, is dropped
    const counts = { delivered: 30 * 60, dropped: 10 * 60, priority: 12 * 60, elapsedMs: 60_000, occupancy: 1 };
    expect(nextDropRate(counts, 0, target)).toBeCloseTo(1 - 8 / 28, 12);
  });

  const runWith = (trace: number[], share: number, mode: "random" | "thinning", seed = 3) =>
    simulate({
      trace,
      target,
      law: nextDropRate,
      periodS: PERIOD_S,
      lagPeriods: 1,
      mode,
      random: seededRandom(seed),
      priorityShare: share,
    });

  for (const mode of ["random", "thinning"] as const) {
    it(`holds the target with 30% priority traffic (${mode}): ±2% in steady state, ±10% two periods after a step`, () => {
      const constant = runWith(
        Array.from({ length: 60 }, () => 2 * T),
        0.3,
        mode,
      );
      const s = summarise(constant, perPeriod, { window: 20, periodS: PERIOD_S });
      expect(s.steadyStateError).toBeLessThan(0.02);
      // Every priority message delivered, in every period.
      for (const r of constant) expect(r.delivered).toBeGreaterThanOrEqual(r.priority);
      const step = runWith(
        Array.from({ length: 60 }, (_, k) => (k < 20 ? 1.5 * T : 3 * T)),
        0.3,
        mode,
      );
      const stepped = summarise(step, perPeriod, { stepAt: 20, window: 20, periodS: PERIOD_S });
      expect(stepped.settlingPeriods).not.toBeNull();
      expect(stepped.settlingPeriods as number).toBeLessThanOrEqual(2);
      expect(stepped.steadyStateError).toBeLessThan(0.02);
    });
  }

  it("drops every other message while priority traffic alone exceeds the target, and holds the target again once it falls", () => {
    // 3× the target, half of it priority (P = 1.5 T); then 2× the target, 10% priority.
    const trace = Array.from({ length: 40 }, (_, k) => (k < 20 ? 3 * T : 2 * T));
    const shares = trace.map((_, k) => (k < 20 ? 0.5 : 0.1));
    const results = simulate({
      trace,
      target,
      law: nextDropRate,
      periodS: PERIOD_S,
      lagPeriods: 1,
      random: seededRandom(5),
      priorityShare: shares,
    });
    // From the second period on (one of lag), nothing but priority is delivered, and all of it.
    for (const r of results.slice(2, 20)) {
      expect(r.appliedRate).toBe(1);
      expect(r.delivered).toBe(r.priority);
      expect(r.delivered).toBeGreaterThan(perPeriod);
    }
    // Two periods after priority falls below the target, the target holds within 10% again.
    const after = summarise(results, perPeriod, { stepAt: 20, window: 15, periodS: PERIOD_S });
    expect(after.settlingPeriods as number).toBeLessThanOrEqual(2);
    expect(after.steadyStateError).toBeLessThan(0.02);
  });
});

/**
 * The throttle's law with priority traffic (docs/throttling.md, "Priority messages"), for priority
 * from none to far above the target: the drop rate of the rest is in [0,1]; below the target the
 * channel delivers exactly the target (priority + what passes of the rest) or everything offered;
 * from the target on, every other message is dropped.
 */
describe("the throttle's law with priority traffic", () => {
  const rate = fc.double({ min: 0, max: 1e5, noNaN: true, noDefaultInfinity: true });

  it("solves for the rest: P + N·(1 − p) = T below the target, p = 1 from it, p = 0 when all fits", () => {
    fc.assert(
      fc.property(
        rate,
        fc.double({ min: 0.01, max: 1e4, noNaN: true }),
        fc.double({ min: 0, max: 3, noNaN: true }),
        (rest, t, priorityShare) => {
          // Priority from 0 to 3× the target, the rest anything.
          const priority = priorityShare * t;
          const offered = priority + rest;
          const p = feedForwardRate(offered, t, priority);
          expect(p).toBeGreaterThanOrEqual(0);
          expect(p).toBeLessThanOrEqual(1);
          const delivered = priority + rest * (1 - p);
          if (offered <= t) {
            expect(p).toBe(0);
          } else if (priority >= t) {
            expect(p).toBe(1);
          } else {
            expect(p).toBeLessThan(1);
            expect(Math.abs(delivered - t)).toBeLessThanOrEqual(1e-9 * Math.max(1, offered));
          }
          // Priority is never held back: what is delivered is never below it, nor below min(offered, T).
          expect(delivered + 1e-9 * Math.max(1, offered)).toBeGreaterThanOrEqual(
            Math.min(offered, Math.max(t, priority)),
          );
        },
      ),
      RUNS,
    );
  });

  it("from a period's counts, the same law, whatever the period's length", () => {
    fc.assert(
      fc.property(
        fc.nat({ max: 100_000 }),
        fc.nat({ max: 100_000 }),
        fc.nat({ max: 100_000 }),
        fc.integer({ min: 1, max: 600_000 }),
        fc.integer({ min: 1, max: 1000 }),
        (priority, restDelivered, dropped, elapsedMs, perSecond) => {
          const counts = { delivered: priority + restDelivered, dropped, priority, elapsedMs, occupancy: 1 };
          const s = elapsedMs / 1000;
          const p = nextDropRate(counts, 0.5, { kind: "messages", perSecond });
          expect(p).toBe(feedForwardRate((priority + restDelivered + dropped) / s, perSecond, priority / s));
        },
      ),
      RUNS,
    );
  });
});
