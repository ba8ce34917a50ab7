// @ts-check
// One poll's answer on the page (GET /v1/admin/overview): the top line of totals, a card per listed
// channel, and the record's line on the analytics channel's card.

import { cardNames, cardOf, removeCard, renderChannel } from "./cards.js";
import { $, show } from "./dom.js";
import { secondsBetween } from "./format.js";
import { everySampled, recentWindowMs } from "./periods.js";

/** @import { CardActions, Overview, Point, RecordTotals } from "./types.js" */

/** @type {{ at: number, denied: Record<string, number> } | null} The denial counts at the previous poll. */
let totals = null;
/** @type {{ at: number, record: RecordTotals } | null} The record's totals at the previous poll. */
let recorded = null;

/**
 * @param {Overview} overview
 * @param {CardActions} actions what the cards' buttons do after their calls
 */
export function render(overview, actions) {
  const time = { now: overview.now, windowMs: recentWindowMs(overview.channels) };
  renderTotals(overview, time.windowMs);
  show("#empty", overview.channels.length === 0);
  const listed = new Set(overview.channels.map((c) => c.channel));
  // A channel that left the list (no traffic within the window) takes its card and chart with it.
  for (const name of cardNames()) if (!listed.has(name)) removeCard(name);
  for (const c of overview.channels) renderChannel(c, actions, time);
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
 * The top line. Its message rates are the sum of the sampled channels' newest periods that ended
 * within `windowMs` (a sharded channel's shards each count as one): a channel idle since has no recent
 * period and adds nothing, and the line says the window and how many channels it summed. Each card's
 * numbers are the same period's, so they agree. Beside them: the deployment's totals (counts, not
 * rates of another period) and rate-limit denials per second since the previous poll.
 * @param {Overview} overview
 * @param {number} windowMs
 */
function renderTotals({ now, messages, rate_limits, channels }, windowMs) {
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
  const sampled = everySampled(channels).filter((c) => c.snapshot);
  const recent = /** @type {Point[]} */ (sampled.map((c) => c.snapshot).filter((p) => p && now - p.at <= windowMs));
  const sum = (/** @type {(p: Point) => number} */ f) => recent.reduce((n, p) => n + f(p), 0).toFixed(1);
  const within = Math.round(windowMs / 1000);
  const latest = item(
    `Latest periods (${recent.length} of ${sampled.length} sampled channels, ended within ${within} s): delivered`,
    sum((p) => p.delivered_rate),
  );
  latest.className = "latest";
  latest.title = `Each sampled channel's newest period, if it ended in the last ${within} s (one and a half sampler periods, as the charts' sweeps are spaced): a channel with no traffic since is not counted.`;
  const title = document.createElement("span");
  title.textContent = "Rate-limit denials:";
  $("#limits").replaceChildren(
    ...(sampled.length
      ? [
          latest,
          item(
            "dropped",
            sum((p) => p.dropped_rate),
          ),
        ]
      : []),
    item("In all: delivered", messages.delivered.toLocaleString("en"), ""),
    item("dropped", messages.dropped.toLocaleString("en"), ""),
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
