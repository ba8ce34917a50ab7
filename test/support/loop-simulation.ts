/**
 * A deterministic simulation of the throttle loop: synthetic traffic, the drop decision per message
 * (random or thinning, seeded), the sampler's law once per period, and actuation lag between the two.
 * Used by test/functions/sampler-law.test.ts to assert the law's guarantees and by `npm run bench:loop`; a test
 * and benchmark harness around the shipped law (functions/sampler.ts), not part of the pack.
 *
 * Model: period k lasts `periodS` seconds and offers `round(A_k · periodS)` messages, where A_k comes
 * from the trace. Each message is dropped with the rate in force. At the end of period k the law sees
 * the period's counts and computes a new rate; with `lagPeriods` = L it is in force from period
 * k + 1 + L (L = 1 models a KV write that reaches the throttle a period late).
 */
import {
  isMeaningfulChange,
  nextDropRate,
  type PeriodCounts,
  roundRate,
  type SamplerTarget,
} from "../../functions/sampler";
import { Thinning } from "../../functions/thinning";

export type Law = (counts: PeriodCounts, currentRate: number, target: SamplerTarget) => number;

export interface SimulationOptions {
  /** Offered messages per second in each period. */
  trace: number[];
  target: SamplerTarget;
  law: Law;
  periodS?: number;
  lagPeriods?: number;
  mode?: "random" | "thinning";
  random: () => number;
  occupancy?: number;
  /**
   * Share of each period's offered messages that is priority (docs/throttling.md, "Priority
   * messages"): never dropped, counted as delivered and as priority; one share for every period, or
   * one per period. Default 0.
   */
  priorityShare?: number | number[];
}

export interface PeriodResult {
  offered: number;
  /** Priority messages among the offered (all delivered). */
  priority: number;
  delivered: number;
  dropped: number;
  /** The drop rate in force during the period. */
  appliedRate: number;
  /** The rate the law wrote after the period (the stored value, rounded). */
  writtenRate: number;
  /** Whether that write was meaningful enough to reach KV. */
  wrote: boolean;
}

/** Runs the loop over the trace. */
export function simulate(opts: SimulationOptions): PeriodResult[] {
  const periodS = opts.periodS ?? 60;
  const lag = opts.lagPeriods ?? 1;
  const occupancy = opts.occupancy ?? 1;
  const thinning = new Thinning();
  // pipeline[i] is the rate that will be in force i periods from now.
  const pipeline: number[] = Array.from({ length: lag + 1 }, () => 0);
  let stored = 0;
  const out: PeriodResult[] = [];
  for (const [k, rate] of opts.trace.entries()) {
    const applied = pipeline.shift() ?? 0;
    const offered = Math.round(rate * periodS);
    const share = Array.isArray(opts.priorityShare) ? (opts.priorityShare[k] ?? 0) : (opts.priorityShare ?? 0);
    const priority = Math.round(offered * share);
    let delivered = priority;
    for (let i = priority; i < offered; i++) {
      const drop = opts.mode === "thinning" ? thinning.drop("sim", applied) : opts.random() < applied;
      if (!drop) delivered++;
    }
    const counts: PeriodCounts = {
      delivered,
      dropped: offered - delivered,
      priority,
      elapsedMs: periodS * 1000,
      occupancy,
    };
    const next = roundRate(opts.law(counts, stored, opts.target));
    const wrote = isMeaningfulChange(stored, next);
    if (wrote) stored = next;
    pipeline.push(stored);
    out.push({
      offered,
      priority,
      delivered,
      dropped: offered - delivered,
      appliedRate: applied,
      writtenRate: stored,
      wrote,
    });
  }
  return out;
}

export interface LoopSummary {
  /** |mean delivered − target| / target over the last `window` periods. */
  steadyStateError: number;
  /** Periods after the step until delivered stays within ±10% of target (null: never). */
  settlingPeriods: number | null;
  /** Largest delivered / target − 1 from the change until settled: what the actuation lag lets through. */
  peakBeforeSettled: number;
  /** Largest |delivered − allowed| / allowed once settled. */
  maxErrorAfterSettled: number | null;
  /** Relative standard deviation of delivered per period over the last `window` periods. */
  dispersion: number;
  /** KV writes per hour of simulated time. */
  kvWritesPerHour: number;
  /** Periods with offered above target and nothing delivered. */
  starvedPeriods: number;
}

/**
 * Summarises a run against a target of `targetPerPeriod` delivered messages. `stepAt` is the period
 * where the interesting change happens (settling and overshoot are measured from there); `window`
 * is how many final periods count as steady state.
 */
export function summarise(
  results: PeriodResult[],
  targetPerPeriod: number,
  opts: { stepAt?: number; window?: number; periodS?: number } = {},
): LoopSummary {
  const window = Math.min(opts.window ?? 20, results.length);
  const periodS = opts.periodS ?? 60;
  const tail = results.slice(-window).map((r) => Math.min(r.delivered, Number.POSITIVE_INFINITY));
  // What the law should deliver: the target, or all that is offered below it — or the priority
  // messages alone when they exceed it (every other one dropped).
  const allowedPerPeriod = (r: PeriodResult) => Math.max(Math.min(r.offered, targetPerPeriod), r.priority);
  const tailTargets = results.slice(-window).map(allowedPerPeriod);
  const mean = tail.reduce((a, b) => a + b, 0) / window;
  const meanTarget = tailTargets.reduce((a, b) => a + b, 0) / window;
  const sd = Math.sqrt(tail.reduce((a, b) => a + (b - mean) ** 2, 0) / Math.max(1, window - 1));
  const stepAt = opts.stepAt ?? 0;
  let settling: number | null = null;
  for (let k = stepAt; k < results.length; k++) {
    const ok = results.slice(k).every((r) => Math.abs(r.delivered - allowedPerPeriod(r)) <= 0.1 * allowedPerPeriod(r));
    if (ok) {
      settling = k - stepAt;
      break;
    }
  }
  const settledAt = settling === null ? results.length : stepAt + settling;
  const peakBeforeSettled = Math.max(
    0,
    ...results.slice(stepAt, Math.max(stepAt + 1, settledAt)).map((r) => r.delivered / targetPerPeriod - 1),
  );
  const after = results.slice(settledAt);
  const maxErrorAfterSettled =
    settling === null || after.length === 0
      ? null
      : Math.max(...after.map((r) => Math.abs(r.delivered - allowedPerPeriod(r)) / allowedPerPeriod(r)));
  return {
    steadyStateError: Math.abs(mean - meanTarget) / meanTarget,
    settlingPeriods: settling,
    peakBeforeSettled,
    maxErrorAfterSettled,
    dispersion: mean > 0 ? sd / mean : 0,
    kvWritesPerHour: (results.filter((r) => r.wrote).length * 3600) / (results.length * periodS),
    starvedPeriods: results.filter((r) => r.offered > targetPerPeriod && r.delivered === 0).length,
  };
}

/** The synthetic traces, in multiples of the target rate per period. */
export function traces(targetPerSecond: number): Record<string, { trace: number[]; stepAt: number }> {
  const t = targetPerSecond;
  // 60 periods with the change at 20: the last 20 are steady state, well after any settling.
  const n = 60;
  return {
    constant: { trace: Array.from({ length: n }, () => 4 * t), stepAt: 0 },
    "4x step": { trace: Array.from({ length: n }, (_, k) => (k < 20 ? 2 * t : 8 * t)), stepAt: 20 },
    ramp: { trace: Array.from({ length: n }, (_, k) => t * (0.5 + (5.5 * Math.min(k, 40)) / 40)), stepAt: 0 },
    burst: { trace: Array.from({ length: n }, (_, k) => (k === 20 ? 10 * t : 2 * t)), stepAt: 20 },
    "fall below target": { trace: Array.from({ length: n }, (_, k) => (k < 20 ? 4 * t : 0.5 * t)), stepAt: 20 },
  };
}

/**
 * Production timing: the loop in continuous time rather than whole periods — the Cron sweep, KV's
 * propagation lag and (in the two-tier loop) the channel object's fast loop, each with its own period
 * and delay. A fluid model: each step of `dtS` seconds delivers the offered messages times the pass
 * fraction in force, so the numbers show the timing alone, not a random draw's noise.
 *
 * Today's loop (`fastPeriodS` null): every `cronPeriodS` the sweep applies the law to the counts
 * since its last run and writes the rate to KV; isolates apply it `kvLagS + cacheS` later. The
 * two-tier loop: every `fastPeriodS` the channel object applies the same law to its last period and
 * the rate reaches the isolates with their next answers, `pushDelayS` later; the sweep only persists
 * that rate to KV, which a warm isolate does not read (a cold one starts from it).
 */
export interface TimingOptions {
  /** Offered messages per second at time t (seconds). */
  load: (t: number) => number;
  target: SamplerTarget;
  durationS: number;
  cronPeriodS: number;
  kvLagS: number;
  /** The isolate's KV cache (THROTTLE_RATE_CACHE_MS), in seconds. */
  cacheS: number;
  /** The fast loop's period, or null for today's Cron-only loop. */
  fastPeriodS: number | null;
  /** From a fast-loop decision until the isolates apply it, in seconds. */
  pushDelayS: number;
  /** Where the periods stand at t = 0, as a fraction of a period in [0,1). */
  phase: number;
  /** Step of the simulation, in seconds. Default 0.1. */
  dtS?: number;
}

export interface TimingTrace {
  dtS: number;
  /** Per step: offered and delivered messages, and the drop rate in force. */
  offered: number[];
  delivered: number[];
  rate: number[];
}

export function simulateTiming(o: TimingOptions): TimingTrace {
  const dt = o.dtS ?? 0.1;
  const steps = Math.round(o.durationS / dt);
  const pending: { at: number; rate: number }[] = [];
  let applied = 0;
  let stored = 0;
  const cron = { delivered: 0, offered: 0, since: 0, next: o.phase * o.cronPeriodS };
  const fast = { delivered: 0, offered: 0, since: 0, next: o.fastPeriodS ? o.phase * o.fastPeriodS : Infinity };
  let fastRate = 0;
  const law = (c: { delivered: number; offered: number; since: number }, end: number, current: number) =>
    roundRate(
      nextDropRate(
        { delivered: c.delivered, dropped: c.offered - c.delivered, elapsedMs: (end - c.since) * 1000, occupancy: 1 },
        current,
        o.target,
      ),
    );
  const out: TimingTrace = { dtS: dt, offered: [], delivered: [], rate: [] };
  for (let i = 0; i < steps; i++) {
    const t = i * dt;
    while (pending.length > 0 && (pending[0] as { at: number }).at <= t + 1e-9)
      applied = (pending.shift() as { rate: number }).rate;
    const offered = o.load(t) * dt;
    const delivered = offered * (1 - applied);
    out.offered.push(offered);
    out.delivered.push(delivered);
    out.rate.push(applied);
    for (const c of [cron, fast]) {
      c.offered += offered;
      c.delivered += delivered;
    }
    const end = t + dt;
    if (o.fastPeriodS && end >= fast.next - 1e-9) {
      fastRate = law(fast, end, fastRate);
      pending.push({ at: end + o.pushDelayS, rate: fastRate });
      Object.assign(fast, { delivered: 0, offered: 0, since: end, next: fast.next + o.fastPeriodS });
    }
    if (end >= cron.next - 1e-9) {
      // Two-tier: the sweep persists the fast rate for cold isolates; warm ones never wait on it.
      if (!o.fastPeriodS) {
        const next = law(cron, end, stored);
        if (isMeaningfulChange(stored, next)) {
          stored = next;
          pending.push({ at: end + o.kvLagS + o.cacheS, rate: stored });
        }
      }
      Object.assign(cron, { delivered: 0, offered: 0, since: end, next: cron.next + o.cronPeriodS });
    }
  }
  return out;
}

export interface TimingSummary {
  /** Messages delivered above the target from the surge's start on. */
  excess: number;
  /** Messages dropped that the target would have let through, from the surge's start on. */
  overDropped: number;
  /** Seconds from the surge's start until delivered stays within ±10% of the target (null: never, during the surge). */
  holdS: number | null;
  /** Seconds from the surge's end until delivered stays within ±10% of min(offered, target) (null: never). */
  releaseS: number | null;
}

/**
 * Summarises a timing trace against a target of `targetPerSecond`, for a surge from `startS` to
 * `endS` (null: it never ends).
 */
export function summariseTiming(
  tr: TimingTrace,
  targetPerSecond: number,
  surge: { startS: number; endS: number | null },
): TimingSummary {
  const dt = tr.dtS;
  const allowed = (i: number) => Math.min(tr.offered[i] as number, targetPerSecond * dt);
  const ok = (i: number) => Math.abs((tr.delivered[i] as number) - allowed(i)) <= 0.1 * allowed(i) + 1e-9;
  const first = Math.round(surge.startS / dt);
  const last = surge.endS === null ? tr.offered.length : Math.round(surge.endS / dt);
  let excess = 0;
  let overDropped = 0;
  for (let i = first; i < tr.offered.length; i++) {
    excess += Math.max(0, (tr.delivered[i] as number) - targetPerSecond * dt);
    overDropped += Math.max(0, allowed(i) - (tr.delivered[i] as number));
  }
  /** The earliest step in [from, to) from which every step up to `to` is within the band. */
  const settledFrom = (from: number, to: number): number | null => {
    let s: number | null = null;
    for (let i = to - 1; i >= from; i--) {
      if (!ok(i)) break;
      s = i;
    }
    return s;
  };
  const hold = settledFrom(first, last);
  const release = surge.endS === null ? null : settledFrom(last, tr.offered.length);
  return {
    excess,
    overDropped,
    holdS: hold === null ? null : (hold - first) * dt,
    releaseS: release === null ? null : (release - last) * dt,
  };
}

/** The production-timing scenarios: a 30-second surge to 4× the target, and a sustained 4× step. */
export function timingScenarios(
  targetPerSecond: number,
): Record<string, { load: (t: number) => number; startS: number; endS: number | null }> {
  const base = targetPerSecond / 2;
  const surge = 4 * targetPerSecond;
  return {
    "30 s surge to 4×": { load: (t) => (t >= 120 && t < 150 ? surge : base), startS: 120, endS: 150 },
    "sustained 4× step": { load: (t) => (t >= 120 ? surge : base), startS: 120, endS: null },
  };
}

/** Today's loop and the two-tier loop at production timing (Cron 60 s, KV lag 60 s, fast 5 s). */
export const PRODUCTION_TIMING = {
  cronPeriodS: 60,
  kvLagS: 60,
  cacheS: 1,
  fastPeriodS: 5,
  pushDelayS: 1,
  durationS: 420,
} as const;
