// @ts-check
// One card per listed channel: its drop mode, its numbers (facts.js), its charts, its audience, its
// latest summary of drops, and its forms that set or clear the channel's drop rate and target.

import { api, messageOf, statusOf } from "./api.js";
import { renderAudience } from "./audience.js";
import { $, setError } from "./dom.js";
import { renderSummary } from "./drop-summary.js";
import { renderFacts } from "./facts.js";
import { forgetOccupancy, renderOccupancy } from "./occupancy-chart.js";
import { mountRatesChart, renderRatesChart, unmountRatesChart } from "./rates-chart.js";

/** @import { CardActions, Channel, ChannelView } from "./types.js" */
/** @import { PollTime } from "./facts.js" */

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
 * @param {PollTime} time the server's clock and the recent window (facts.js)
 */
export function renderChannel(c, actions, time) {
  let view = cards.get(c.channel);
  if (!view) {
    view = createCard(c.channel, actions);
    cards.set(c.channel, view);
  }
  renderOccupancy(c, view.el, time.now);
  renderAudience(view.el, c);
  renderDropMode(view.el, c.drop_mode);
  renderSummary(view.el, c.last_summary ?? null);
  renderFacts(view.el, c, time);
  renderRatesChart(view, c.series ?? [], c.target !== null && c.target !== undefined, time.now);
}

/** What each drop mode means (docs/throttling.md, "Random drop or deterministic thinning"). */
const DROP_MODES = {
  random:
    "Random drop: each message is dropped by its own random draw with probability equal to the drop rate, so the share dropped in a period scatters a little around it. Channels matching THROTTLE_THINNING drop by deterministic thinning instead.",
  thinning:
    "Deterministic thinning (THROTTLE_THINNING): messages pass at exactly 1 − drop rate, evenly spaced by a running credit instead of a random draw, so delivered counts do not scatter. Other channels drop at random.",
};

/**
 * The badge naming how the channel drops, with what that means as its title.
 * @param {HTMLElement} el
 * @param {string} mode `random` or `thinning`
 */
function renderDropMode(el, mode) {
  const badge = document.createElement("span");
  badge.className = "drop-mode";
  badge.textContent = mode === "thinning" ? "thinning" : "random drop";
  badge.title = mode === "thinning" ? DROP_MODES.thinning : DROP_MODES.random;
  badge.setAttribute("aria-label", badge.title);
  $(".badges", el).replaceChildren(badge);
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
  const view = { el, data: [[], [], [], [], [], []], plot: null, observer: null, now: Date.now() / 1000 };
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
