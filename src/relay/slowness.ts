/**
 * A slow subscriber is thinned before it is dropped (docs/api.md, "Slow subscribers"): when the bytes
 * waiting for it pass half of {@link SUBSCRIBER_MAX_BEHIND_BYTES}, its relay holds it to half the rate
 * it is taking, halving again (at most once per {@link SLOW_STEP_MS}) while the backlog grows; once it
 * has drained to {@link DRAINED_BYTES} the rate doubles a step at a time until it is back where it
 * was, and the thinning ends. Over the whole bound it drops to 1 message a second at once; only one
 * still over the bound, and not shrinking, a step after that is closed (4008). Pure.
 */
import { SUBSCRIBER_MAX_BEHIND_BYTES } from "./bounds";
import { MIN_READER_RATE_PER_S } from "./reader-rate";

/** A subscriber's thinning for slowness. */
export interface Slowness {
  /** Messages a second it is held to (at least {@link MIN_READER_RATE_PER_S}). */
  readonly rate: number;
  /** The rate it was taking when first thinned: lifted back to it, the thinning ends. */
  readonly from: number;
  /** When the last step was taken (epoch ms), and the backlog then. */
  readonly at: number;
  readonly bytes: number;
}

/** Bytes waiting past which a subscriber is thinned: half the bound. */
export const THIN_AT_BYTES = SUBSCRIBER_MAX_BEHIND_BYTES / 2;
/** Bytes waiting at or below which it has drained: its rate is raised a step. */
export const DRAINED_BYTES = SUBSCRIBER_MAX_BEHIND_BYTES / 8;
/** Least time between two steps (down or up): a step must have time to show in the backlog. */
export const SLOW_STEP_MS = 1000;

/**
 * The next state of a subscriber's thinning after a look at its backlog (`bytes` at `now`; `taking`:
 * messages a second it is offered and held to now): the same object when nothing changes, null when
 * not (or no longer) thinned, or `close`.
 */
export function slownessStep(
  s: Slowness | null,
  bytes: number,
  now: number,
  taking: number,
): Slowness | null | "close" {
  const min = MIN_READER_RATE_PER_S;
  const due = s !== null && now - s.at >= SLOW_STEP_MS;
  if (bytes > SUBSCRIBER_MAX_BEHIND_BYTES) {
    if (s === null || s.rate > min) return { rate: min, from: s?.from ?? Math.max(min, taking), at: now, bytes };
    return due && bytes >= s.bytes ? "close" : s;
  }
  if (bytes > THIN_AT_BYTES) {
    if (s === null) return { rate: Math.max(min, Math.floor(taking / 2)), from: Math.max(min, taking), at: now, bytes };
    if (due && bytes > s.bytes && s.rate > min)
      return { ...s, rate: Math.max(min, Math.floor(s.rate / 2)), at: now, bytes };
    return s;
  }
  if (s !== null && due && bytes <= DRAINED_BYTES) {
    const rate = s.rate * 2;
    return rate >= s.from ? null : { ...s, rate, at: now, bytes };
  }
  return s;
}
