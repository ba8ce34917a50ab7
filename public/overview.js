// @ts-check
// One poll's answer on the page (GET /v1/admin/overview): the top line of totals, a card per listed
// channel, and the record's line on the analytics channel's card.

import { cardNames, cardOf, removeCard, renderChannel } from "./cards.js";
import { $, show } from "./dom.js";
import { secondsBetween } from "./format.js";

/** @import { CardActions, Overview, Point, ReaderTotals, RecordTotals } from "./types.js" */

/** @type {{ at: number, denied: Record<string, number> } | null} The denial counts at the previous poll. */
let totals = null;
/** @type {{ at: number, record: RecordTotals } | null} The record's totals at the previous poll. */
let recorded = null;

/**
 * @param {Overview} overview
 * @param {CardActions} actions what the cards' buttons do after their calls
 */
export function render(overview, actions) {
  renderTotals(overview);
  show("#empty", overview.channels.length === 0);
  const listed = new Set(overview.channels.map((c) => c.channel));
  // A channel that left the list (no traffic within the window) takes its card and chart with it.
  for (const name of cardNames()) if (!listed.has(name)) removeCard(name);
  for (const c of overview.channels) renderChannel(c, actions);
  renderRecord(overview);
}

/** Takes every card off the page and forgets the previous poll's counts (logging out). */
export function clearOverview() {
  for (const name of cardNames()) removeCard(name);
  totals = null;
  recorded = null;
}

/**
 * On the analytics channel's card: copies recorded per second since the previous poll, and the
 * record's failures (a failed copy is a drop the record will never hold).
 * @param {Overview} overview
 */
function renderRecord({ now, record }) {
  if (!record) return;
  const prev = recorded;
  recorded = { at: now, record };
  const card = cardOf(record.channel);
  if (!card || !prev) return;
  const secs = secondsBetween(prev.at, now);
  const perSecond = Math.max(0, (record.copies - prev.record.copies) / secs).toFixed(1);
  const line = $(".record", card);
  line.textContent = `Recorded ${perSecond} copies/s; ${record.failures} failed copies in all`;
  line.classList.toggle("dropping", record.failures > prev.record.failures);
  line.hidden = false;
}

/**
 * The top line. Its message rates are the sum of the cards' snapshots (each channel's newest period),
 * so a card's numbers and the top line agree; the deployment's totals beside them are counts, not
 * rates of another period. Rate-limit denials are per second since the previous poll.
 * @param {Overview} overview
 */
function renderTotals({ now, messages, rate_limits, channels, readers }) {
  /** @type {Record<string, number>} */
  const denied = {};
  for (const [bucket, counts] of Object.entries(rate_limits)) denied[bucket] = counts.denied;
  const prev = totals;
  totals = { at: now, denied };
  const secs = prev ? secondsBetween(prev.at, now) : 0;
  /**
   * @param {string} label
   * @param {string} value
   * @param {string} [unit]
   */
  const item = (label, value, unit = "/s") => {
    const span = document.createElement("span");
    const b = document.createElement("b");
    b.textContent = value;
    span.append(`${label} `, b, unit);
    return span;
  };
  const snapshots = channels.map((c) => c.snapshot).filter((p) => p);
  const sum = (/** @type {(p: Point) => number} */ f) =>
    snapshots.reduce((n, p) => n + f(/** @type {Point} */ (p)), 0).toFixed(1);
  const title = document.createElement("span");
  title.textContent = "Rate-limit denials:";
  $("#limits").replaceChildren(
    ...(snapshots.length
      ? [
          item(
            "Sampled channels, latest periods: delivered",
            sum((p) => p.delivered_rate),
          ),
          item(
            "dropped",
            sum((p) => p.dropped_rate),
          ),
        ]
      : []),
    item("In all: delivered", messages.delivered.toLocaleString("en"), ""),
    item("dropped", messages.dropped.toLocaleString("en"), ""),
    // Each reader's rate: subscribers thinned in all (by their max_rate, or for slowness) and skips.
    ...(readers ? readerItems(readers, item) : []),
    ...(prev
      ? [
          title,
          ...Object.entries(denied).map(([bucket, n]) =>
            item(bucket, Math.max(0, (n - (prev.denied[bucket] ?? 0)) / secs).toFixed(1)),
          ),
        ]
      : []),
  );
}

/**
 * The top line's readers: subscribers thinned in all (their own max_rate, their relay for slowness)
 * and the messages skipped for them; each channel's thinned now is in its stats.
 * @param {ReaderTotals} readers
 * @param {(label: string, value: string, unit?: string) => HTMLElement} item
 */
function readerItems(readers, item) {
  return [
    item("Readers thinned: by max_rate", readers.thinned_max_rate.toLocaleString("en"), ""),
    item("for slowness", readers.thinned_slow.toLocaleString("en"), ""),
    item("skipped for them", readers.skipped.toLocaleString("en"), ""),
  ];
}
