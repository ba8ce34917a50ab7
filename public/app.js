// @ts-check
// Floodgate dashboard: polls GET /v1/admin/overview (docs/api.md, Operator routes) and charts each busy
// channel. No build step: plain browser ES modules (this one is the page's entry), typechecked by
// public/tsconfig.json (npm run typecheck); uPlot is copied into /vendor by scripts/build-assets.mjs.

import { api, credentials, HttpError, messageOf, statusOf } from "./api.js";
import { renderAudience } from "./audience.js";
import { $, setError, show } from "./dom.js";
import { renderSummary } from "./drop-summary.js";
import { allowedText, clockTime, countText, secondsBetween, targetText } from "./format.js";
import { forgetOccupancy, renderOccupancy } from "./occupancy-chart.js";
import { mountRatesChart, renderRatesChart, unmountRatesChart } from "./rates-chart.js";

/** @import { CardActions, Channel, ChannelView, Overview, Point, RecordTotals, SamplerReport } from "./types.js" */

// ---- a channel's card ----

/** @type {Map<string, ChannelView>} */
const cards = new Map();

/** The names of the channels that have a card, in the order their cards were made. */
function cardNames() {
  return [...cards.keys()];
}

/**
 * The card of channel `name`, if it has one.
 * @param {string} name
 */
function cardOf(name) {
  return cards.get(name)?.el;
}

/**
 * Shows the channel on its card, making the card the first time the channel is listed.
 * @param {Channel} c
 * @param {CardActions} actions
 */
function renderChannel(c, actions) {
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
function removeCard(name) {
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

// ---- one poll's answer: the totals, the cards, the record's line ----

/** @type {{ at: number, denied: Record<string, number> } | null} The denial counts at the previous poll. */
let totals = null;
/** @type {{ at: number, record: RecordTotals } | null} The record's totals at the previous poll. */
let recorded = null;

/**
 * @param {Overview} overview
 * @param {CardActions} actions what the cards' buttons do after their calls
 */
function render(overview, actions) {
  renderTotals(overview);
  show("#empty", overview.channels.length === 0);
  const listed = new Set(overview.channels.map((c) => c.channel));
  // A channel that left the list (no traffic within the window) takes its card and chart with it.
  for (const name of cardNames()) if (!listed.has(name)) removeCard(name);
  for (const c of overview.channels) renderChannel(c, actions);
  renderRecord(overview);
}

/** Takes every card off the page and forgets the previous poll's counts (logging out). */
function clearOverview() {
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
function renderTotals({ now, messages, rate_limits, channels }) {
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

// ---- polling, the toolbar, what a failed call shows ----

const POLL_MS = 2000;

const state = {
  /** Whether polling runs (logged in and the page visible). */
  polling: false,
  /** @type {ReturnType<typeof setTimeout> | undefined} The next poll, once the last one finished. */
  timer: undefined,
  /** @type {AbortController | null} The poll in flight. */
  inFlight: null,
};

/** @type {CardActions} After a card's call succeeds the page polls at once; a 401 logs it out. */
const cardActions = { refresh: poll, fail: handleError };

/** Polls now and then every POLL_MS, unless the page is hidden (it resumes when shown). */
function startPolling() {
  state.polling = document.visibilityState !== "hidden";
  if (state.polling) poll();
}

/** Stops polling: cancels the next poll and aborts the one in flight. */
function stopPolling() {
  state.polling = false;
  clearTimeout(state.timer);
  state.inFlight?.abort();
  state.inFlight = null;
}

/**
 * One poll. The next is scheduled only when this one has finished, so polls never overlap; a poll
 * started meanwhile (after an action) aborts this one and takes over the schedule.
 */
async function poll() {
  clearTimeout(state.timer);
  state.inFlight?.abort();
  const ctl = new AbortController();
  state.inFlight = ctl;
  try {
    /** @type {Overview} */
    const overview = await api("/v1/admin/overview", { signal: ctl.signal });
    if (ctl.signal.aborted) return;
    setError($("#app-error"), null);
    $("#status").textContent = `Updated ${clockTime(Date.now())}`;
    render(overview, cardActions);
  } catch (e) {
    if (!ctl.signal.aborted) handleError(e);
  } finally {
    if (state.inFlight === ctl) {
      state.inFlight = null;
      if (state.polling) state.timer = setTimeout(poll, POLL_MS);
    }
  }
}

// A hidden page neither polls nor keeps a poll waiting; it catches up at once when shown again.
document.addEventListener("visibilitychange", () => {
  if (!credentials.token || $("#app").hidden) return;
  if (document.visibilityState === "hidden") stopPolling();
  else if (!state.polling) startPolling();
});
window.addEventListener("pagehide", () => stopPolling());
// A page restored from the back/forward cache was stopped by its pagehide.
window.addEventListener("pageshow", (ev) => {
  if (ev.persisted && credentials.token && !$("#app").hidden && !state.polling) startPolling();
});

$("#sample").addEventListener("click", async () => {
  const btn = /** @type {HTMLButtonElement} */ ($("#sample"));
  btn.disabled = true;
  try {
    /** @type {SamplerReport} */
    const report = await api("/v1/admin/sample", { method: "POST" });
    const written = report.channels.filter((c) => c.written).length;
    $("#status").textContent = `Sampler: ${report.channels.length} channels visited, ${written} rates written`;
    await poll();
  } catch (e) {
    handleError(e);
  } finally {
    btn.disabled = false;
  }
});

/**
 * What a failed call shows: nothing more for bad configuration (the banner says it), the login
 * screen for a refused token, the error line for the rest.
 * @param {unknown} e
 */
function handleError(e) {
  if (e instanceof HttpError && e.variable) {
    setError($("#app-error"), null); // the banner says it
    return;
  }
  if (statusOf(e) === 401) {
    $("#logout").click();
    setError($("#login-error"), "The admin token is no longer accepted. Log in again.");
    return;
  }
  setError($("#app-error"), messageOf(e));
}

// ---- logging in and out ----

const TOKEN_KEY = "floodgate.admin";

/** Opens the page: the dashboard if this tab holds a token from an earlier login, else the login screen. */
function boot() {
  credentials.token = sessionStorage.getItem(TOKEN_KEY);
  if (credentials.token) start();
  else show("#login", true);
}

function start() {
  show("#login", false);
  show("#app", true);
  show("#toolbar", true);
  startPolling();
}

/**
 * What a refused login says. A 429 is the server's budget on failed admin logins from this address
 * (docs/security.md): every login is refused until it refills, the right token included.
 * @param {unknown} e
 */
function loginError(e) {
  if (e instanceof HttpError && e.variable)
    return "The server cannot log anyone in until its configuration is fixed (above).";
  if (statusOf(e) === 401)
    return "That token was refused. Use the server's ADMIN_TOKEN (locally: dev-only-admin-token, from .dev.vars).";
  if (statusOf(e) === 429) {
    const wait = e instanceof HttpError && e.retryAfter ? e.retryAfter : 60;
    return `Too many failed logins from this address: wait ${wait} s before trying again.`;
  }
  return messageOf(e);
}

$("#login-form").addEventListener("submit", async (ev) => {
  ev.preventDefault();
  const token = /** @type {HTMLInputElement} */ ($("#token")).value.trim();
  credentials.token = token;
  setError($("#login-error"), null);
  try {
    await api("/v1/admin/overview");
  } catch (e) {
    setError($("#login-error"), loginError(e));
    credentials.token = null;
    return;
  }
  sessionStorage.setItem(TOKEN_KEY, token);
  start();
});

$("#logout").addEventListener("click", () => {
  sessionStorage.removeItem(TOKEN_KEY);
  credentials.token = null;
  stopPolling();
  clearOverview();
  show("#app", false);
  show("#toolbar", false);
  show("#login", true);
});

// ---- boot ----

boot();
