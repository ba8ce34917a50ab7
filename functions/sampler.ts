/**
 * The sampler's control law (docs/throttling.md): from one period's counts, the drop rate for the next.
 *
 * Pure and platform-neutral: the Worker's scheduled handler, `POST /v1/admin/sample`, the simulation
 * harness and `npm run bench:loop` all call the same functions.
 *
 * ## The law: feed-forward on the offered rate
 *
 *     offered rate  A = (delivered + dropped) / elapsed seconds
 *     drop rate     p = A ≤ T ? 0 : 1 − T / A
 *
 * Why this and not feedback on the delivered rate. The throttle sees a new rate late: KV takes up to
 * ~60 s to propagate and each isolate caches the rate, so a rate written after period k acts in period
 * k+2 (one period of actuation lag). The offered count does not depend on the drop rate at all (a
 * dropped message is still counted), so a law driven by it has no loop through the plant: it cannot
 * oscillate, and after a change in load it is exact as soon as the rate computed from the new load
 * is in force — lag + 1 periods. A law driven by the delivered count ("scale the last pass fraction
 * by target/delivered") is a feedback loop with gain 1 around that lag; its characteristic equation
 * z² − z + 1 = 0 has poles on the unit circle, so it rings for ever (see the simulation tests).
 *
 * Why no smoothing. Smoothing helps a noisy measurement; the offered count is exact (every publish
 * is counted once, delivered or dropped), and its only noise is the traffic's own. An EWMA would only
 * add lag and break the two-period settling guarantee. The noise that remains is in the *delivered*
 * count of a random drop (relative SD ≈ 1/√(T·τ) per period); deterministic thinning, not smoothing,
 * is the cure for that (`functions/thinning.ts`).
 *
 * ## Priority messages (docs/throttling.md, "Priority messages")
 *
 * A priority message is never dropped, and it is delivered: it counts against the target like any
 * other. With P the priority rate and N = A − P the rate of the rest, the law solves for the drop
 * rate of the rest that delivers the target in all:
 *
 *     p = clamp(1 − (T − P) / N, 0, 1)        and p = 1 when P ≥ T
 *
 * so P + N·(1 − p) = T whenever P < T < A, and every other message is dropped when priority traffic
 * alone reaches the target. With P = 0 it is the law above. The drop rate only ever applies to the
 * rest: priority messages never meet it.
 *
 * Guarantees (each asserted in test/functions/sampler-law.test.ts with a seeded simulation):
 * - p ∈ [0,1] always, and p < 1 whenever the target is positive and above the priority rate: a
 *   period with offered > target is never starved of the rest.
 * - p = 0 whenever offered ≤ target, in the first sample after the load falls.
 * - Constant overload: mean delivered within ±2% of target over 20 periods.
 * - A 4× step in load: delivered within ±10% of target from the second period after the step on, with
 *   one period of actuation lag.
 */

/** A target for one channel, resolved to messages per second. */
export type SamplerTarget =
  /** Messages per second delivered on the channel. */
  | { kind: "messages"; perSecond: number }
  /** Deliveries (messages × subscribers) per second; divided by the current subscriber count. */
  | { kind: "deliveries"; perSecond: number };

/** One channel's counts over one sampling period. */
export interface PeriodCounts {
  delivered: number;
  dropped: number;
  /**
   * Priority messages among the delivered ones (never dropped by the throttle); absent: none. They
   * count in `delivered` too.
   */
  priority?: number;
  /** Real elapsed time of the period, in ms (a late cron run measures a longer period). */
  elapsedMs: number;
  /** Subscribers at the end of the period. */
  occupancy: number;
}

/**
 * The message rate a target allows right now. A delivery budget is split across the subscribers:
 * 5000 deliveries/s with 50 subscribers allows 100 messages/s. With no subscribers a message costs no
 * delivery at all, so nothing needs to be dropped (Infinity).
 */
export function allowedMessageRate(target: SamplerTarget, occupancy: number): number {
  if (target.kind === "messages") return target.perSecond;
  return occupancy > 0 ? target.perSecond / occupancy : Number.POSITIVE_INFINITY;
}

/** The offered rate in messages per second, or null when the period has no length. */
export function offeredRate(counts: Pick<PeriodCounts, "delivered" | "dropped" | "elapsedMs">): number | null {
  if (!(counts.elapsedMs > 0)) return null;
  return (counts.delivered + counts.dropped) / (counts.elapsedMs / 1000);
}

/** The priority rate in messages per second (0 when the period has no length or none came). */
export function priorityRate(counts: Pick<PeriodCounts, "priority" | "elapsedMs">): number {
  if (!(counts.elapsedMs > 0) || !(counts.priority && counts.priority > 0)) return 0;
  return counts.priority / (counts.elapsedMs / 1000);
}

/**
 * The feed-forward law: the drop rate of the messages that are not priority that lets `allowed`
 * messages per second through in all when `offered` arrive, `priority` of them priority (never
 * dropped). 0 when offered ≤ allowed; 1 when priority alone reaches `allowed`; in [0,1) otherwise.
 */
export function feedForwardRate(offered: number, allowed: number, priority = 0): number {
  const p = Math.max(0, Math.min(priority, offered));
  if (!(offered > allowed)) return 0;
  if (!(allowed > p)) return 1;
  // offered > allowed > p, so the rest is positive
  return clampRate(1 - (allowed - p) / (offered - p));
}

/**
 * The next drop rate for a channel. A period with no length carries no information, so the current
 * rate stays.
 */
export function nextDropRate(counts: PeriodCounts, currentRate: number, target: SamplerTarget): number {
  const offered = offeredRate(counts);
  if (offered === null) return clampRate(currentRate);
  return clampRate(feedForwardRate(offered, allowedMessageRate(target, counts.occupancy), priorityRate(counts)));
}

/**
 * The naive ratio law, kept only so the simulation can show why we do not use it: scale the last
 * written pass fraction by target / delivered.
 */
export function naiveRatioRate(counts: PeriodCounts, currentRate: number, target: SamplerTarget): number {
  if (!(counts.elapsedMs > 0)) return clampRate(currentRate);
  const delivered = counts.delivered / (counts.elapsedMs / 1000);
  const allowed = allowedMessageRate(target, counts.occupancy);
  if (delivered <= 0) return 0;
  const pass = (1 - clampRate(currentRate)) * (allowed / delivered);
  return clampRate(1 - pass);
}

/** Drop rates are written with this many decimals (KV holds text; 1e-4 is far below the noise). */
export const RATE_DECIMALS = 4;

/** Rounds a rate for storage; a positive rate never rounds to 0 or up to 1. */
export function roundRate(rate: number): number {
  const r = clampRate(rate);
  if (r === 0 || r === 1) return r;
  const f = 10 ** RATE_DECIMALS;
  return Math.min(1 - 1 / f, Math.max(1 / f, Math.round(r * f) / f));
}

/**
 * Least relative change in the pass fraction (1 − p) worth a KV write. Delivered traffic is
 * proportional to the pass fraction, so 1% here moves the delivered rate by 1% — half the ±2%
 * steady-state band — while a channel at constant load writes nothing at all.
 */
export const MEANINGFUL_PASS_CHANGE = 0.01;

/**
 * Whether `next` differs enough from the stored rate to write it. KV allows one write per second
 * per key and bills every write, so tiny changes are skipped; releasing to 0 and starting to throttle
 * are always written.
 */
export function isMeaningfulChange(stored: number | null, next: number): boolean {
  const from = stored ?? 0;
  if (from === next) return false;
  if (from === 0 || next === 0) return true;
  const passFrom = 1 - from;
  const passTo = 1 - next;
  if (passFrom <= 0) return true;
  return Math.abs(passTo - passFrom) / passFrom >= MEANINGFUL_PASS_CHANGE;
}

/** Clamps a drop rate to [0,1]; NaN becomes 0. */
export function clampRate(n: number): number {
  if (!(n > 0)) return 0;
  return Math.min(n, 1);
}
