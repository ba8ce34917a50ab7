// @ts-check
// The crowd's voice: the channel's latest summary of drops (docs/api.md, "Summaries of drops").

import { $ } from "./dom.js";
import { clockTime, secondsBetween } from "./format.js";

/** @import { DropSummary } from "./types.js" */

/** Keys of a summary the card names; the rest are summed into "others". */
const SUMMARY_KEYS_SHOWN = 5;

/**
 * What the throttle dropped in the channel's latest summary, largest keys first.
 * @param {HTMLElement} el the channel's card
 * @param {DropSummary | null} summary
 */
export function renderSummary(el, summary) {
  const p = $(".crowd", el);
  if (!summary) {
    p.hidden = true;
    return;
  }
  // Largest first, "(other)" last: a JSON object's key order carries no meaning.
  const keys = Object.entries(summary.by_key).sort(
    ([a, x], [b, y]) => Number(a === "(other)") - Number(b === "(other)") || y - x,
  );
  const shown = keys.slice(0, SUMMARY_KEYS_SHOWN);
  const rest = keys.slice(SUMMARY_KEYS_SHOWN).reduce((n, [, count]) => n + count, 0);
  const parts = shown.map(([key, count]) => `${key} ${count}`);
  if (rest > 0) parts.push(`others ${rest}`);
  const secs = secondsBetween(summary.from, summary.to);
  p.textContent = `Dropped ${summary.dropped} in ${secs.toFixed(1)} s at ${clockTime(summary.to)}: ${parts.join(" · ")}`;
  p.hidden = false;
}
