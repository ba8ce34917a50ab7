// @ts-check
// Floodgate dashboard: polls GET /v1/admin/overview (docs/api.md, Operator routes) and charts each busy
// channel. No build step: plain browser JavaScript, typechecked by public/tsconfig.json (npm run
// typecheck); uPlot is copied into /vendor by scripts/build-assets.mjs.

const POLL_MS = 2000;
const HISTORY_POINTS = 150; // one point per sampler run: 2.5 hours at the production cron's minute
const TOKEN_KEY = "floodgate.admin";

/**
 * @typedef {string | { deliveries: string } | null} TargetJson
 * @typedef {{ sampled_at: number, offered_rate: number | null, allowed_rate: number | null,
 *   delivered: number, dropped: number, elapsed_ms: number, new_rate: number, written: boolean }} Sample
 * @typedef {{ channel: string, last_seen_at: number, drop_rate: number, drop_mode: string,
 *   target: TargetJson, target_rate: number | null, occupancy: number | null, last_sample: Sample | null,
 *   lever?: Lever, shard?: string, sharding?: { pattern: string, by: string } | null, shards?: Channel[] }} Channel
 * @typedef {{ points_to: "throttle" | "shard" | "none", message_rate: number | null, occupancy: number | null,
 *   rule: string }} Lever
 * @typedef {{ channel: string, copies: number, failures: number }} RecordTotals
 * @typedef {{ now: number, channels: Channel[], messages: { delivered: number, dropped: number },
 *   rate_limits: Record<string, { allowed: number, denied: number }>, record?: RecordTotals }} Overview
 * @typedef {{ channels: { written?: boolean }[] }} SamplerReport
 * @typedef {(number | null)[]} Series
 * @typedef {[number[], Series, Series, Series, Series]} ChartData x (seconds), offered, delivered, dropped, target
 * @typedef {{ el: HTMLElement, data: ChartData, sampledAt: number | null,
 *   plot: uPlot | null, observer: ResizeObserver | null }} ChannelView
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
  /** @type {{ at: number, messages: Overview["messages"], denied: Record<string, number> } | null} */
  totals: null,
  /** @type {{ at: number, record: RecordTotals } | null} The record's totals at the previous poll. */
  record: null,
};

class HttpError extends Error {
  /**
   * @param {number} status
   * @param {{ msg?: string } | null} body
   * @param {number | null} [retryAfter] seconds, from a 429's Retry-After
   */
  constructor(status, body, retryAfter = null) {
    super(body?.msg ?? `HTTP ${status}`);
    this.status = status;
    this.retryAfter = retryAfter;
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
    throw new HttpError(res.status, typeof body === "object" ? body : { msg: `HTTP ${res.status}` }, retryAfter);
  }
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
 * Messages and rate-limit denials per second across the deployment, since the previous poll.
 * @param {Overview} overview
 */
function renderTotals({ now, messages, rate_limits }) {
  /** @type {Record<string, number>} */
  const denied = {};
  for (const [bucket, counts] of Object.entries(rate_limits)) denied[bucket] = counts.denied;
  const prev = state.totals;
  state.totals = { at: now, messages, denied };
  if (!prev) return;
  const secs = Math.max(0.001, (now - prev.at) / 1000);
  /** @param {number} n */
  const perSecond = (n) => Math.max(0, n / secs).toFixed(1);
  /**
   * @param {string} label
   * @param {string} value
   */
  const item = (label, value) => {
    const span = document.createElement("span");
    const b = document.createElement("b");
    b.textContent = value;
    span.append(`${label} `, b, "/s");
    return span;
  };
  const title = document.createElement("span");
  title.textContent = "Rate-limit denials:";
  $("#limits").replaceChildren(
    item("All channels: delivered", perSecond(messages.delivered - prev.messages.delivered)),
    item("dropped", perSecond(messages.dropped - prev.messages.dropped)),
    title,
    ...Object.entries(denied).map(([bucket, n]) => item(bucket, perSecond(n - (prev.denied[bucket] ?? 0)))),
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
  const el = view.el;
  renderAudience(el, c);
  $(".rate", el).textContent = c.drop_rate.toFixed(3);
  $(".rate", el).classList.toggle("dropping", c.drop_rate > 0);
  $(".target", el).textContent = targetText(c.target);
  $(".occupancy", el).textContent = c.occupancy === null ? "—" : String(c.occupancy);
  const badge = document.createElement("span");
  badge.textContent = c.drop_mode;
  $(".badges", el).replaceChildren(badge);
  const s = c.last_sample;
  if (!s) {
    $(".now", el).textContent = "—";
    $(".sample", el).textContent = c.target
      ? "Not sampled yet: the sampler has not run since traffic began."
      : "No target: the sampler does not measure this channel (give it a target to see its rates).";
    return;
  }
  // Rates over the sampler's last period: the overview asks no channel object for live counts.
  const secs = Math.max(0.001, s.elapsed_ms / 1000);
  const delivered = s.delivered / secs;
  const dropped = s.dropped / secs;
  $(".now", el).textContent = `${delivered.toFixed(1)} / ${dropped.toFixed(1)}`;
  $(".sample", el).textContent =
    `Last sample ${new Date(s.sampled_at).toLocaleTimeString()}: offered ${s.offered_rate ?? "?"}/s, allowed ${s.allowed_rate ?? "∞"}/s → drop rate ${s.new_rate}${s.written ? "" : " (unchanged)"}`;
  if (s.sampled_at === view.sampledAt) return;
  view.sampledAt = s.sampled_at;
  const d = view.data;
  d[0].push(s.sampled_at / 1000);
  d[1].push(s.offered_rate ?? delivered + dropped);
  d[2].push(delivered);
  d[3].push(dropped);
  d[4].push(s.allowed_rate);
  if (d[0].length > HISTORY_POINTS) for (const series of d) series.shift();
  view.plot?.setData(d);
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
  const view = { el, data: [[], [], [], [], []], sampledAt: null, plot: null, observer: null };
  const chart = $(".chart", el);
  if (typeof uPlot === "function") {
    const plot = new uPlot(
      {
        width: chart.clientWidth || 320,
        height: 180,
        scales: { x: { time: true } },
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
