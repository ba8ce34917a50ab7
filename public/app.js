// @ts-check
// Floodgate dashboard: polls GET /v1/admin/overview (docs/api.md, Operator routes) and charts each busy
// channel. No build step: a plain browser ES module, typechecked by public/tsconfig.json (npm run
// typecheck); uPlot is copied into /vendor by scripts/build-assets.mjs.

const POLL_MS = 2000;
/** A chart with one point spans this much time around it (seconds), not uPlot's years. */
const SINGLE_POINT_SPAN_S = 30;
const TOKEN_KEY = "floodgate.admin";

/**
 * @typedef {string | { deliveries: string } | null} TargetJson
 * @typedef {{ sampled_at: number, offered_rate: number | null, allowed_rate: number | null,
 *   delivered: number, dropped: number, elapsed_ms: number, new_rate: number, written: boolean }} Sample
 * @typedef {{ at: number, by: "fast loop" | "sweep", elapsed_ms: number, delivered: number, dropped: number,
 *   occupancy: number, allowed_rate: number | null, drop_rate: number, offered_rate: number,
 *   delivered_rate: number, dropped_rate: number }} Point one period as a loop decided it (docs/api.md)
 * @typedef {{ channel: string, last_seen_at: number, drop_rate: number, drop_mode: string,
 *   target: TargetJson, target_rate: number | null, occupancy: number | null, last_sample: Sample | null,
 *   last_summary?: DropSummary | null, series?: Point[], snapshot?: Point | null,
 *   lever?: Lever, shard?: string, sharding?: { pattern: string, by: string } | null, shards?: Channel[] }} Channel
 * @typedef {{ from: number, to: number, dropped: number, by_key: Record<string, number> }} DropSummary
 * @typedef {{ points_to: "throttle" | "shard" | "none", message_rate: number | null, occupancy: number | null,
 *   rule: string }} Lever
 * @typedef {{ channel: string, copies: number, failures: number }} RecordTotals
 * @typedef {{ now: number, channels: Channel[], messages: { delivered: number, dropped: number },
 *   rate_limits: Record<string, { allowed: number, denied: number }>, record?: RecordTotals }} Overview
 * @typedef {{ channels: { written?: boolean }[] }} SamplerReport
 * @typedef {(number | null)[]} Series
 * @typedef {[number[], Series, Series, Series, Series]} ChartData x (seconds), offered, delivered, dropped, target
 * @typedef {{ el: HTMLElement, data: ChartData, plot: uPlot | null, observer: ResizeObserver | null }} ChannelView
 */

/**
 * The element `sel` matches, which the page is known to have (a missing one is a bug in the page).
 * @param {string} sel
 * @param {ParentNode} [root]
 * @returns {HTMLElement}
 */
function $(sel, root = document) {
  const el = root.querySelector(sel);
  if (!el) throw new Error(`dashboard: no ${sel}`);
  return /** @type {HTMLElement} */ (el);
}

const state = {
  token: sessionStorage.getItem(TOKEN_KEY),
  /** Whether polling runs (logged in and the page visible). */
  polling: false,
  /** @type {ReturnType<typeof setTimeout> | undefined} The next poll, once the last one finished. */
  timer: undefined,
  /** @type {AbortController | null} The poll in flight. */
  inFlight: null,
  /** @type {Map<string, ChannelView>} */
  channels: new Map(),
  /** @type {{ at: number, denied: Record<string, number> } | null} */
  totals: null,
  /** @type {{ at: number, record: RecordTotals } | null} The record's totals at the previous poll. */
  record: null,
};

class HttpError extends Error {
  /**
   * @param {number} status
   * @param {{ msg?: string, meta?: { variable?: string } } | null} body
   * @param {number | null} [retryAfter] seconds, from a 429's Retry-After
   */
  constructor(status, body, retryAfter = null) {
    super(body?.msg ?? `HTTP ${status}`);
    this.status = status;
    this.retryAfter = retryAfter;
    /** The variable a 500 names when the server's configuration is bad (docs/api.md, errors). */
    this.variable = status === 500 ? (body?.meta?.variable ?? null) : null;
  }
}

/**
 * Calls the API with the admin token. An aborted call rejects with the fetch's AbortError.
 * @param {string} path
 * @param {RequestInit} [init]
 * @returns {Promise<any>} the JSON body, or null for 204
 */
async function api(path, init = {}) {
  let res;
  try {
    res = await fetch(path, {
      ...init,
      headers: { authorization: `Bearer ${state.token}`, "content-type": "application/json", ...(init.headers ?? {}) },
    });
  } catch (e) {
    if (init.signal?.aborted) throw e;
    throw new HttpError(0, { msg: "Cannot reach the server. Is it running (npm start)?" });
  }
  if (res.status === 204) return null;
  const text = await res.text();
  let body = null;
  try {
    body = JSON.parse(text);
  } catch {
    body = text;
  }
  if (!res.ok) {
    const retryAfter = Number(res.headers.get("retry-after")) || null;
    const err = new HttpError(res.status, typeof body === "object" ? body : { msg: `HTTP ${res.status}` }, retryAfter);
    renderConfigBanner(err.variable ? err.message : null);
    throw err;
  }
  renderConfigBanner(null);
  return body;
}

/**
 * @param {string} id
 * @param {boolean} visible
 */
function show(id, visible) {
  $(id).hidden = !visible;
}

/**
 * @param {HTMLElement} el
 * @param {string | null} message
 */
function setError(el, message) {
  el.textContent = message ?? "";
  el.hidden = !message;
}

/**
 * The bad-configuration banner: shown, on the login screen too, for as long as the server answers
 * with a configuration error (every route does, naming the variable), gone with its first good answer.
 * @param {string | null} message
 */
function renderConfigBanner(message) {
  const banner = $("#config-banner");
  banner.hidden = !message;
  if (!message) return;
  $(".message", banner).textContent = message;
}

/** @param {unknown} e */
function statusOf(e) {
  return e instanceof HttpError ? e.status : null;
}

/** @param {unknown} e */
function messageOf(e) {
  return e instanceof Error ? e.message : String(e);
}

// ---- login --------------------------------------------------------------------------------------

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
  state.token = /** @type {HTMLInputElement} */ ($("#token")).value.trim();
  setError($("#login-error"), null);
  try {
    await api("/v1/admin/overview");
  } catch (e) {
    setError($("#login-error"), loginError(e));
    state.token = null;
    return;
  }
  sessionStorage.setItem(TOKEN_KEY, state.token);
  start();
});

$("#logout").addEventListener("click", () => {
  sessionStorage.removeItem(TOKEN_KEY);
  state.token = null;
  stopPolling();
  for (const name of [...state.channels.keys()]) removeCard(name);
  state.totals = null;
  state.record = null;
  show("#app", false);
  show("#toolbar", false);
  show("#login", true);
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

// ---- polling ------------------------------------------------------------------------------------

function start() {
  show("#login", false);
  show("#app", true);
  show("#toolbar", true);
  startPolling();
}

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
    $("#status").textContent = `Updated ${new Date().toLocaleTimeString()}`;
    render(overview);
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
  if (!state.token || $("#app").hidden) return;
  if (document.visibilityState === "hidden") stopPolling();
  else if (!state.polling) startPolling();
});
window.addEventListener("pagehide", () => stopPolling());
// A page restored from the back/forward cache was stopped by its pagehide.
window.addEventListener("pageshow", (ev) => {
  if (ev.persisted && state.token && !$("#app").hidden && !state.polling) startPolling();
});

/** @param {unknown} e */
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

// ---- rendering ----------------------------------------------------------------------------------

/** @param {Overview} overview */
function render(overview) {
  renderTotals(overview);
  show("#empty", overview.channels.length === 0);
  const listed = new Set(overview.channels.map((c) => c.channel));
  // A channel that left the list (no traffic within the window) takes its card and chart with it.
  for (const name of [...state.channels.keys()]) if (!listed.has(name)) removeCard(name);
  for (const c of overview.channels) renderChannel(c);
  renderRecord(overview);
}

/**
 * On the analytics channel's card: copies recorded per second since the previous poll, and the
 * record's failures (a failed copy is a drop the record will never hold).
 * @param {Overview} overview
 */
function renderRecord({ now, record }) {
  if (!record) return;
  const prev = state.record;
  state.record = { at: now, record };
  const view = state.channels.get(record.channel);
  if (!view || !prev) return;
  const secs = Math.max(0.001, (now - prev.at) / 1000);
  const perSecond = Math.max(0, (record.copies - prev.record.copies) / secs).toFixed(1);
  const line = $(".record", view.el);
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
  const prev = state.totals;
  state.totals = { at: now, denied };
  const secs = prev ? Math.max(0.001, (now - prev.at) / 1000) : 0;
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

/** @param {TargetJson} t */
function targetText(t) {
  if (t === null || t === undefined) return "none";
  return typeof t === "string" ? t : `${t.deliveries} deliveries`;
}

/** @param {Channel} c */
function renderChannel(c) {
  let view = state.channels.get(c.channel);
  if (!view) {
    view = createCard(c.channel);
    state.channels.set(c.channel, view);
  }
  renderOccupancy(c, view.el);
  renderAudience(view.el, c);
  const badge = document.createElement("span");
  badge.textContent = c.drop_mode;
  $(".badges", view.el).replaceChildren(badge);
  renderSummary(view.el, c.last_summary ?? null);
  renderSnapshot(view, c);
  renderChart(view, c.series ?? [], c.target !== null && c.target !== undefined);
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
    const allowed = p.allowed_rate === null ? "any rate" : `${p.allowed_rate}/s`;
    $(".sample", el).textContent =
      `No target now: the sampler no longer measures this channel. Its last decision, at ${new Date(p.at).toLocaleTimeString()}, was under the target it had then (${allowed}).`;
    return;
  }
  const rate = p ? p.drop_rate : c.drop_rate;
  $(".rate", el).textContent = rate.toFixed(3);
  $(".rate", el).classList.toggle("dropping", rate > 0);
  if (!p) {
    $(".occupancy", el).textContent = c.occupancy === null ? "—" : String(c.occupancy);
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
  const when = new Date(p.at).toLocaleTimeString();
  const secs = (p.elapsed_ms / 1000).toFixed(1);
  const allowed = p.allowed_rate === null ? "any rate" : `${p.allowed_rate}/s`;
  $(".sample", el).textContent =
    `${p.by === "sweep" ? "Sweep" : "Fast loop"} at ${when}, over ${secs} s: offered ${p.offered_rate}/s, target allowed ${allowed} → drop rate ${p.drop_rate}`;
}

/**
 * The chart, from the server's series: both loops' decisions since the run began, so a page opened
 * mid-run (or reloaded) shows the run. The target line is what each period's target allowed.
 * A channel without a target now draws no target line: the card says "none", and so does the chart.
 * @param {ChannelView} view
 * @param {Point[]} series
 * @param {boolean} targeted whether the channel has a target now
 */
function renderChart(view, series, targeted) {
  const d = view.data;
  for (const line of d) line.length = 0;
  for (const p of series) {
    d[0].push(p.at / 1000);
    d[1].push(p.offered_rate);
    d[2].push(p.delivered_rate);
    d[3].push(p.dropped_rate);
    d[4].push(targeted ? p.allowed_rate : null);
  }
  const plot = view.plot;
  if (!plot) return;
  plot.setData(d);
  showLatest(plot);
  // How many points the chart holds, on its element (the browser test reads it; recordSpan adds the
  // time axis's span).
  const chart = $(".chart", view.el);
  chart.dataset.points = String(d[0].length);
}

/**
 * The legend shows the newest point's values while the cursor is off the chart (uPlot's own shows
 * "--" until hovered).
 * @param {uPlot} u
 */
function showLatest(u) {
  const last = u.data[0].length - 1;
  if (last >= 0 && u.cursor.idx == null) u.setLegend({ idx: last }, false);
}

/**
 * The time axis: the data's own span, or {@link SINGLE_POINT_SPAN_S} around a single point. uPlot
 * alone widens one timestamp by 86,400 / `ms` units — in seconds, 1,000 days: "Apr 2027 … Aug 2029".
 * @param {uPlot} u
 * @param {number | null} min
 * @param {number | null} max
 * @returns {uPlot.Range.MinMax}
 */
function timeRange(u, min, max) {
  const xs = u.data[0];
  const first = xs[0];
  const last = xs[xs.length - 1];
  if (first === undefined || last === undefined) {
    const now = Date.now() / 1000;
    return [now - SINGLE_POINT_SPAN_S, now];
  }
  if (last - first < 1) return [first - SINGLE_POINT_SPAN_S / 2, last + SINGLE_POINT_SPAN_S / 2];
  return [min ?? first, max ?? last];
}

/**
 * Records the time axis's span (seconds) on the chart's element once uPlot has set it, for the
 * browser test (a canvas shows a script nothing).
 * @param {uPlot} u
 * @param {string} key
 */
function recordSpan(u, key) {
  const x = u.scales.x;
  if (key !== "x" || !x || x.min == null || x.max == null) return;
  const chart = u.root.parentElement;
  if (chart) chart.dataset.span = String(Math.round(x.max - x.min));
}

// ---- the crowd's voice: the channel's latest summary of drops (docs/api.md, "Summaries of drops") ----

/** Keys of a summary the card names; the rest are summed into "others". */
const SUMMARY_KEYS_SHOWN = 5;

/**
 * What the throttle dropped in the channel's latest summary, largest keys first.
 * @param {HTMLElement} el the channel's card
 * @param {DropSummary | null} summary
 */
function renderSummary(el, summary) {
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
  const secs = Math.max(0.001, (summary.to - summary.from) / 1000);
  p.textContent = `Dropped ${summary.dropped} in ${secs.toFixed(1)} s at ${new Date(summary.to).toLocaleTimeString()}: ${parts.join(" · ")}`;
  p.hidden = false;
}

// ---- Occupancy over time (docs/api.md, "Presence") ----
// Each card keeps the channel's occupancy at every poll where it moved (or after a minute unchanged),
// in its own small chart below the rates.

/** @typedef {{ data: [number[], (number | null)[]], plot: uPlot | null, observer: ResizeObserver | null }} OccupancyView */
/** @type {Map<string, OccupancyView>} */
const occupancyViews = new Map();

/**
 * @param {Channel} c
 * @param {HTMLElement} card
 */
function renderOccupancy(c, card) {
  let view = occupancyViews.get(c.channel);
  if (!view) {
    const chart = document.createElement("div");
    chart.className = "occupancy-chart";
    chart.setAttribute("aria-label", "Subscribers over time");
    $(".chart", card).after(chart);
    /** @type {OccupancyView} */
    const made = { data: [[], []], plot: null, observer: null };
    if (typeof uPlot === "function") {
      const plot = new uPlot(
        {
          width: chart.clientWidth || 320,
          height: 100,
          scales: { x: { time: true } },
          axes: [{ stroke: "#8b98a5" }, { stroke: "#8b98a5", label: "subscribers" }],
          series: [{}, { label: "occupancy", stroke: "#58a6ff", width: 2 }],
          // One series, named by its axis: a legend would only repeat the card's subscriber count.
          legend: { show: false },
        },
        made.data,
        chart,
      );
      made.plot = plot;
      made.observer = new ResizeObserver(() => plot.setSize({ width: chart.clientWidth, height: 100 }));
      made.observer.observe(chart);
    }
    view = made;
    occupancyViews.set(c.channel, view);
  }
  const [times, values] = view.data;
  const series = c.series ?? [];
  if (series.length > 0) {
    // A sampled channel: its occupancy as the server's series has it, so a page opened mid-run shows
    // the run (each point's subscribers as its loop counted them).
    view.data = [series.map((p) => p.at / 1000), series.map((p) => p.occupancy)];
    view.plot?.setData(view.data);
    return;
  }
  // Not sampled: no series on the server, so the page keeps what it saw.
  const now = Date.now() / 1000;
  const last = values.at(-1);
  const lastAt = times.at(-1) ?? 0;
  if (last === c.occupancy && now - lastAt < 60) return;
  times.push(now);
  values.push(c.occupancy);
  if (times.length > OCCUPANCY_POINTS) {
    times.shift();
    values.shift();
  }
  view.plot?.setData(view.data);
}

/** Occupancy points a page keeps for a channel the sampler does not measure (one per minute at most). */
const OCCUPANCY_POINTS = 150;

/** @param {string} name */
function forgetOccupancy(name) {
  const view = occupancyViews.get(name);
  view?.observer?.disconnect();
  view?.plot?.destroy();
  occupancyViews.delete(name);
}

// ---- audience: the lever and a sharded channel's shards (docs/throttling.md, "Which lever") ------

/**
 * The card's lever line (message rate and occupancy side by side, and what they point to) and, for
 * a sharded channel, one row per shard with its own numbers and lever.
 * @param {HTMLElement} el
 * @param {Channel} c
 */
function renderAudience(el, c) {
  const lever = $(".lever", el);
  lever.replaceChildren(...leverParts(c.lever));
  lever.dataset.pointsTo = c.lever?.points_to ?? "none";
  const box = $(".shards", el);
  const shards = c.shards ?? [];
  box.hidden = shards.length === 0;
  // A sharded channel's card has no sample of its own: its shards' rows are its numbers.
  $(".chart", el).hidden = shards.length > 0;
  $(".sample", el).hidden = shards.length > 0;
  if (shards.length === 0) return;
  const head = document.createElement("tr");
  for (const h of ["Shard", "Message rate", "Subscribers", "Drop rate", "Lever"]) {
    const th = document.createElement("th");
    th.textContent = h;
    head.append(th);
  }
  const rows = shards.map((s) => {
    const tr = document.createElement("tr");
    const cells = [
      s.shard ?? "",
      s.lever?.message_rate == null ? "—" : `${s.lever.message_rate.toFixed(1)}/s`,
      s.occupancy === null ? "—" : String(s.occupancy),
      s.drop_rate.toFixed(3),
      s.lever?.points_to ?? "none",
    ];
    for (const text of cells) {
      const td = document.createElement("td");
      td.textContent = text;
      tr.append(td);
    }
    if (s.lever) tr.title = s.lever.rule;
    tr.dataset.pointsTo = s.lever?.points_to ?? "none";
    return tr;
  });
  const table = document.createElement("table");
  table.append(head, ...rows);
  const caption = document.createElement("p");
  caption.textContent = `Sharded (${c.sharding?.pattern ?? "?"} by ${c.sharding?.by ?? "?"}): ${shards.length} shards, each a channel of its own; the numbers above add them up.`;
  box.replaceChildren(caption, table);
}

/**
 * "Message rate 12.0/s · Subscribers 1500 → shard", and the rule that said so.
 * @param {Lever | undefined} lever
 * @returns {(string | HTMLElement)[]}
 */
function leverParts(lever) {
  if (!lever) return [];
  const b = document.createElement("b");
  b.textContent = lever.points_to === "none" ? "no lever needed" : lever.points_to;
  const rule = document.createElement("span");
  rule.className = "rule";
  rule.textContent = ` (${lever.rule})`;
  const rate = lever.message_rate === null ? "—" : `${lever.message_rate.toFixed(1)}/s`;
  const occupancy = lever.occupancy === null ? "—" : String(lever.occupancy);
  return [`Message rate ${rate} · Subscribers ${occupancy} → `, b, rule];
}

/** @param {string} name */
function removeCard(name) {
  const view = state.channels.get(name);
  if (!view) return;
  forgetOccupancy(name);
  view.observer?.disconnect();
  view.plot?.destroy();
  view.el.remove();
  state.channels.delete(name);
}

/**
 * @param {string} name
 * @returns {ChannelView}
 */
function createCard(name) {
  const template = /** @type {HTMLTemplateElement} */ ($("#channel-card"));
  const el = /** @type {HTMLElement} */ (template.content.firstElementChild?.cloneNode(true));
  el.dataset.channel = name;
  $(".name", el).textContent = name;
  $("#channels").prepend(el);
  /** @type {ChannelView} */
  const view = { el, data: [[], [], [], [], []], plot: null, observer: null };
  const chart = $(".chart", el);
  if (typeof uPlot === "function") {
    const plot = new uPlot(
      {
        width: chart.clientWidth || 320,
        height: 180,
        scales: { x: { time: true, range: timeRange } },
        hooks: { setCursor: [showLatest], setScale: [recordSpan] },
        axes: [{ stroke: "#8b98a5" }, { stroke: "#8b98a5", label: "msg/s" }],
        series: [
          {},
          { label: "offered", stroke: "#8b98a5", width: 1 },
          { label: "delivered", stroke: "#3fb950", width: 2 },
          { label: "dropped", stroke: "#ff7b72", width: 1 },
          { label: "target", stroke: "#d29922", dash: [6, 4], width: 1 },
        ],
      },
      view.data,
      chart,
    );
    view.plot = plot;
    view.observer = new ResizeObserver(() => plot.setSize({ width: chart.clientWidth, height: 180 }));
    view.observer.observe(chart);
  } else {
    chart.textContent = "Chart library missing: run npm install (it copies uPlot into public/vendor).";
  }
  const cardError = $(".card-error", el);
  /** @param {() => Promise<unknown>} fn */
  const act = async (fn) => {
    setError(cardError, null);
    try {
      await fn();
      await poll();
    } catch (e) {
      if (statusOf(e) === 401) return handleError(e);
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

// ---- boot ---------------------------------------------------------------------------------------

if (state.token) start();
else show("#login", true);
