// @ts-check
// How the dashboard writes its numbers, times and targets.

/** @import { TargetJson } from "./types.js" */

/** @param {TargetJson | undefined} t */
export function targetText(t) {
  if (t === null || t === undefined) return "none";
  return typeof t === "string" ? t : `${t.deliveries} deliveries`;
}

/**
 * What a period's target allowed: a rate, or any rate when it allowed everything.
 * @param {number | null} allowed messages per second
 */
export function allowedText(allowed) {
  return allowed === null ? "any rate" : `${allowed}/s`;
}

/**
 * A message rate, or a dash when there is none.
 * @param {number | null | undefined} rate messages per second
 */
export function rateText(rate) {
  return rate == null ? "—" : `${rate.toFixed(1)}/s`;
}

/**
 * A count (subscribers), or a dash when unknown.
 * @param {number | null} n
 */
export function countText(n) {
  return n === null ? "—" : String(n);
}

/**
 * The wall-clock time of `ms` (epoch milliseconds) in the browser's locale.
 * @param {number} ms
 */
export function clockTime(ms) {
  return new Date(ms).toLocaleTimeString();
}

/**
 * Seconds from `from` to `to` (epoch milliseconds), never zero, so a rate over them is defined.
 * @param {number} from
 * @param {number} to
 */
export function secondsBetween(from, to) {
  return Math.max(0.001, (to - from) / 1000);
}
