/**
 * The decision of a channel's fast loop (docs/throttling.md, "Two loops") at the end of one of its
 * periods: the sampler's law (functions/sampler.ts) on the period's counts gives the rate the next
 * answers carry, and whether the loop goes on. Platform-neutral: the channel's object
 * (src/channel/fast-loop.ts) keeps the counts and the alarm. Priority messages in the
 * counts (`counts.priority`, never dropped) count as delivered: the law drops more of the rest so
 * the channel still holds its target, and all of the rest once priority alone reaches it.
 */
import { nextDropRate, type PeriodCounts, roundRate, type SamplerTarget } from "./sampler";

/** What one fast-loop period ends with. */
export interface FastLoopStep {
  /** The drop rate from now on. */
  rate: number;
  /** When the next period ends (epoch ms), or 0: the loop stops and sets no alarm. */
  dueAt: number;
}

/**
 * The step at `now` for a period with `counts`, run at `rate` against `target` (null: the channel has
 * no target any more, so the loop stops and releases the rate to 0). The loop goes on while the
 * channel is busy (any traffic in the period) or throttled, and stops once a period passes with no
 * traffic, which also releases the rate to 0.
 */
export function fastLoopStep(
  counts: PeriodCounts,
  rate: number,
  target: SamplerTarget | null,
  periodMs: number,
  now: number,
): FastLoopStep {
  if (!target) return { rate: 0, dueAt: 0 };
  const next = roundRate(nextDropRate(counts, rate, target));
  const busy = counts.delivered + counts.dropped > 0;
  return { rate: next, dueAt: busy || next > 0 ? now + periodMs : 0 };
}
