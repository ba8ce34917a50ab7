// @ts-check
// One card per listed channel: its numbers (from the channel's snapshot), its charts, its audience,
// its latest summary of drops, and its forms that set or clear the channel's drop rate and target.

import { api, messageOf, statusOf } from "./api.js";
import { renderAudience } from "./audience.js";
import { $, setError } from "./dom.js";
import { renderSummary } from "./drop-summary.js";
import { allowedText, clockTime, countText, targetText } from "./format.js";
import { forgetOccupancy, renderOccupancy } from "./occupancy-chart.js";
import { mountRatesChart, renderRatesChart, unmountRatesChart } from "./rates-chart.js";

/** @import { CardActions, Channel, ChannelView } from "./types.js" */

/** @type {Map<string, ChannelView>} */
const cards = new Map();

/** The names of the channels that have a card, in the order their cards were made. */
export function cardNames() {
  return [...cards.keys()];
}

/**
 * The card of channel `name`, if it has one.
 * @param {string} name
 */
export function cardOf(name) {
  return cards.get(name)?.el;
}

/**
 * Shows the channel on its card, making the card the first time the channel is listed.
 * @param {Channel} c
 * @param {CardActions} actions
 */
export function renderChannel(c, actions) {
  let view = cards.get(c.channel);
  if (!view) {
    view = createCard(c.channel, actions);
    cards.set(c.channel, view);
  }
  renderOccupancy(c, view.el);
  renderAudience(view.el, c);
  const badge = document.createElement("span");
  badge.textContent = c.drop_mode;
  $(".badges", view.el).replaceChildren(badge);
  renderSummary(view.el, c.last_summary ?? null);
  renderSnapshot(view, c);
  renderRatesChart(view, c.series ?? [], c.target !== null && c.target !== undefined);
}

/**
 * A card's numbers, every one from the channel's snapshot (the newest decision of either loop): its
 * drop rate, rates and subscribers are of one period, and its line says which.
 * @param {ChannelView} view
 * @param {Channel} c
 */
function renderSnapshot(view, c) {
  const el = view.el;
  const p = c.snapshot ?? null;
  $(".target", el).textContent = targetText(c.target);
  if (p && !c.target) {
    // No target now (cleared, or a restart without it): the last decision is history, not the
    // channel's state, so the card shows the rate it runs at and says when the target went.
    $(".rate", el).textContent = c.drop_rate.toFixed(3);
    $(".rate", el).classList.toggle("dropping", c.drop_rate > 0);
    $(".occupancy", el).textContent = "—";
    $(".delivered", el).textContent = "—";
    $(".dropped", el).textContent = "—";
    $(".sample", el).textContent =
      `No target now: the sampler no longer measures this channel. Its last decision, at ${clockTime(p.at)}, was under the target it had then (${allowedText(p.allowed_rate)}).`;
    return;
  }
  const rate = p ? p.drop_rate : c.drop_rate;
  $(".rate", el).textContent = rate.toFixed(3);
  $(".rate", el).classList.toggle("dropping", rate > 0);
  if (!p) {
    $(".occupancy", el).textContent = countText(c.occupancy);
    $(".delivered", el).textContent = "—";
    $(".dropped", el).textContent = "—";
    $(".sample", el).textContent = c.target
      ? "Not sampled yet: the first decision comes within one fast-loop period of the first message."
      : "No target: the sampler does not measure this channel (give it a target to see its rates).";
    return;
  }
  $(".occupancy", el).textContent = String(p.occupancy);
  $(".delivered", el).textContent = p.delivered_rate.toFixed(1);
  $(".dropped", el).textContent = p.dropped_rate.toFixed(1);
  const secs = (p.elapsed_ms / 1000).toFixed(1);
  $(".sample", el).textContent =
    `${p.by === "sweep" ? "Sweep" : "Fast loop"} at ${clockTime(p.at)}, over ${secs} s: offered ${p.offered_rate}/s, target allowed ${allowedText(p.allowed_rate)} → drop rate ${p.drop_rate}`;
}

/**
 * Takes the channel's card, its charts and their ResizeObservers off the page.
 * @param {string} name
 */
export function removeCard(name) {
  const view = cards.get(name);
  if (!view) return;
  forgetOccupancy(name);
  unmountRatesChart(view);
  view.el.remove();
  cards.delete(name);
}

/**
 * @param {string} name
 * @param {CardActions} actions
 * @returns {ChannelView}
 */
function createCard(name, actions) {
  const template = /** @type {HTMLTemplateElement} */ ($("#channel-card"));
  const el = /** @type {HTMLElement} */ (template.content.firstElementChild?.cloneNode(true));
  el.dataset.channel = name;
  $(".name", el).textContent = name;
  $("#channels").prepend(el);
  /** @type {ChannelView} */
  const view = { el, data: [[], [], [], [], []], plot: null, observer: null };
  mountRatesChart(view);
  const cardError = $(".card-error", el);
  /** @param {() => Promise<unknown>} fn */
  const act = async (fn) => {
    setError(cardError, null);
    try {
      await fn();
      await actions.refresh();
    } catch (e) {
      if (statusOf(e) === 401) return actions.fail(e);
      setError(cardError, messageOf(e));
    }
  };
  /** @param {string} what */
  const path = (what) => `/v1/admin/${what}/${encodeURIComponent(name).replace(/%3A/g, ":")}`;
  $(".set-rate", el).addEventListener("submit", (ev) => {
    ev.preventDefault();
    const rate = Number(inputOf(ev, "rate").value);
    act(() => api(path("throttle"), { method: "PUT", body: JSON.stringify({ rate }) }));
  });
  $(".clear-rate", el).addEventListener("click", () => act(() => api(path("throttle"), { method: "DELETE" })));
  $(".set-target", el).addEventListener("submit", (ev) => {
    ev.preventDefault();
    const text = inputOf(ev, "target").value.trim();
    const m = /^deliveries\s+(.+)$/i.exec(text);
    const target = m ? { deliveries: m[1] } : text;
    act(() => api(path("target"), { method: "PUT", body: JSON.stringify({ target }) }));
  });
  $(".clear-target", el).addEventListener("click", () => act(() => api(path("target"), { method: "DELETE" })));
  return view;
}

/**
 * The named input of the form an event was submitted from.
 * @param {Event} ev
 * @param {string} name
 * @returns {HTMLInputElement}
 */
function inputOf(ev, name) {
  const form = /** @type {HTMLFormElement} */ (ev.currentTarget);
  return /** @type {HTMLInputElement} */ (form.elements.namedItem(name));
}
