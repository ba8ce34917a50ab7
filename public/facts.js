// @ts-check
// A card's numbers (its facts): drop rate, target, subscribers, delivered and dropped per second, each
// with a line under it saying how old it is. All but the target are of one period, the card's newest
// (a sharded channel's: its shards' newest, summed), so numbers side by side belong together; a
// period older than the recent window (the channel has had no traffic since) is shown dimmed.

import { $ } from "./dom.js";
import { allowedText, clockTime, countText, targetText } from "./format.js";
import { ageText, cardPeriod, pointBefore } from "./periods.js";

/** @import { Channel, Point } from "./types.js" */

/**
 * What the poll knows beside the channel: the server's clock and the window within which a period
 * counts as recent (periods.js `recentWindowMs`).
 * @typedef {{ now: number, windowMs: number }} PollTime
 */

/**
 * One fact: its value, its age line and what both mean (the fact's title, shown on hover).
 * @param {HTMLElement} el the card
 * @param {string} name the fact's class (`rate`, `target`, `occupancy`, `delivered`, `dropped`)
 * @param {string} value
 * @param {string} age
 * @param {string} title
 */
function setFact(el, name, value, age, title) {
  const dd = $(`.${name}`, el);
  dd.textContent = value;
  const box = /** @type {HTMLElement} */ (dd.parentElement);
  $(".age", box).textContent = age;
  box.title = title;
}

/**
 * The card's facts and the line under its chart.
 * @param {HTMLElement} el the card
 * @param {Channel} c
 * @param {PollTime} time
 */
export function renderFacts(el, c, time) {
  const p = cardPeriod(c);
  setFact(el, "target", targetText(c.target), "now", "The channel's target now.");
  const facts = $(".facts", el);
  facts.classList.remove("stale");
  if (p && !c.target) {
    // No target now (cleared, or a restart without it): the last decision is history, not the
    // channel's state, so the card shows the rate it runs at and says when the target went.
    setRate(el, c.drop_rate, "now", "The drop rate the channel runs at now.");
    for (const name of ["occupancy", "delivered", "dropped"])
      setFact(el, name, "—", "", "Not measured without a target.");
    $(".sample", el).textContent =
      `No target now: the sampler no longer measures this channel. Its last decision, at ${clockTime(p.at)}, was under the target it had then (${allowedText(p.allowed_rate)}).`;
    return;
  }
  if (!p) {
    setRate(el, c.drop_rate, "now", "The drop rate the channel runs at now.");
    setFact(el, "occupancy", countText(c.occupancy), "", "Subscribers as the sampler last counted them.");
    setFact(el, "delivered", "—", "", "Not measured yet.");
    setFact(el, "dropped", "—", "", "Not measured yet.");
    $(".sample", el).textContent = c.target
      ? "Not sampled yet: the first decision comes within one fast-loop period of the first message."
      : "No target: the sampler does not measure this channel (give it a target to see its rates).";
    return;
  }
  renderPeriod(el, c, p, time);
}

/**
 * The facts of the card's period `p`, each aged from the server's `now`.
 * @param {HTMLElement} el
 * @param {Channel} c
 * @param {Point} p
 * @param {PollTime} time
 */
function renderPeriod(el, c, p, { now, windowMs }) {
  const age = ageText(now, p.at);
  const recent = now - p.at <= windowMs;
  $(".facts", el).classList.toggle("stale", !recent);
  const secs = (p.elapsed_ms / 1000).toFixed(1);
  const period = `the ${secs} s period that ended ${age} (${clockTime(p.at)})`;
  // The period's rates ran under the decision before it; the drop rate shown is the one decided at
  // its end. When the two differ, the line under it says what the period ran at.
  const before = pointBefore(c.series ?? [], p);
  const ranAt = before && Math.abs(before.drop_rate - p.drop_rate) >= 0.05 ? before.drop_rate : null;
  setRate(
    el,
    p.drop_rate,
    ranAt === null ? `set ${age}` : `set ${age}, was ${ranAt.toFixed(2)}`,
    `The drop rate decided at the end of ${period}, in force since${ranAt === null ? "" : `; the period ran at ${ranAt.toFixed(3)}`}.`,
  );
  // Counted when the period ended; when the count moved during it (by a tenth or more, or to or from
  // none), what it began with too: subscribers who left at the end of a run leave 0 beside the rate
  // the period delivered to them.
  const began = before?.occupancy ?? null;
  const moved = began !== null && Math.abs(began - p.occupancy) >= Math.max(1, 0.1 * Math.max(began, p.occupancy));
  setFact(
    el,
    "occupancy",
    String(p.occupancy),
    moved ? `${age}, was ${began}` : age,
    `Subscribers when ${period} ended${moved ? `; ${began} when it began` : ""}.`,
  );
  setFact(
    el,
    "delivered",
    p.delivered_rate.toFixed(1),
    age,
    `Messages per second the throttle let through over ${period}: each went to every subscriber (with none, to history only).`,
  );
  setFact(el, "dropped", p.dropped_rate.toFixed(1), age, `Messages per second the throttle dropped over ${period}.`);
  const by = c.shards?.length ? "Shards' latest periods" : p.by === "sweep" ? "Sweep" : "Fast loop";
  const idle = recent ? "" : " Nothing measured since: the channel has had no traffic.";
  $(".sample", el).textContent =
    `${by} at ${clockTime(p.at)} (${age}), over ${secs} s: offered ${p.offered_rate}/s, target allowed ${allowedText(p.allowed_rate)} → drop rate ${round(p.drop_rate)}.${idle}`;
}

/**
 * @param {HTMLElement} el
 * @param {number} rate
 * @param {string} age
 * @param {string} title
 */
function setRate(el, rate, age, title) {
  setFact(el, "rate", rate.toFixed(3), age, title);
  // Red only while messages are being dropped: an idle channel's 0.000 is nothing to warn about.
  $(".rate", el).classList.toggle("dropping", rate > 0);
}

/** @param {number} n */
function round(n) {
  return Math.round(n * 10_000) / 10_000;
}
