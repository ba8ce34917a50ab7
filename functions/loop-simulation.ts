/**
 * A deterministic simulation of the throttle loop: synthetic traffic, the drop decision per message
 * (random or thinning, seeded), the sampler's law once per period, and actuation lag between the two.
 * Used by test/sampler-law.test.ts to assert the law's guarantees and by `npm run bench:loop`.
 *
 * Model: period k lasts `periodS` seconds and offers `round(A_k · periodS)` messages, where A_k comes
 * from the trace. Each message is dropped with the rate in force. At the end of period k the law sees
 * the period's counts and computes a new rate; with `lagPeriods` = L it is in force from period
 * k + 1 + L (L = 1 models a KV write that reaches the throttle a period late).
 */
import { isMeaningfulChange, type PeriodCounts, roundRate, type SamplerTarget } from "./sampler";
import { Thinning } from "./thinning";

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
}

export interface PeriodResult {
  offered: number;
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
  for (const rate of opts.trace) {
    const applied = pipeline.shift() ?? 0;
    const offered = Math.round(rate * periodS);
    let delivered = 0;
    for (let i = 0; i < offered; i++) {
      const drop = opts.mode === "thinning" ? thinning.drop("sim", applied) : opts.random() < applied;
      if (!drop) delivered++;
    }
    const counts: PeriodCounts = { delivered, dropped: offered - delivered, elapsedMs: periodS * 1000, occupancy };
    const next = roundRate(opts.law(counts, stored, opts.target));
    const wrote = isMeaningfulChange(stored, next);
    if (wrote) stored = next;
    pipeline.push(stored);
    out.push({ offered, delivered, dropped: offered - delivered, appliedRate: applied, writtenRate: stored, wrote });
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
  const allowedPerPeriod = (r: PeriodResult) => Math.min(r.offered, targetPerPeriod);
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
