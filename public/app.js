// Floodgate dashboard: polls the admin API every 2 s and charts each active channel.
// No build step: plain browser JavaScript; uPlot is copied into /vendor by scripts/build-assets.mjs.

const POLL_MS = 2000;
const HISTORY_POINTS = 150; // 5 minutes at one point per 2 s
const TOKEN_KEY = "floodgate.admin";

const $ = (sel, root = document) => root.querySelector(sel);
const state = { token: sessionStorage.getItem(TOKEN_KEY), timer: null, channels: new Map(), denials: null };

class HttpError extends Error {
  constructor(status, body) {
    super(body?.msg ?? `HTTP ${status}`);
    this.status = status;
  }
}

async function api(path, init = {}) {
  let res;
  try {
    res = await fetch(path, {
      ...init,
      headers: { authorization: `Bearer ${state.token}`, "content-type": "application/json", ...(init.headers ?? {}) },
    });
  } catch {
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
  if (!res.ok) throw new HttpError(res.status, typeof body === "object" ? body : { msg: `HTTP ${res.status}` });
  return body;
}

function show(id, visible) {
  $(id).hidden = !visible;
}

function setError(el, message) {
  el.textContent = message ?? "";
  el.hidden = !message;
}

// ---- login --------------------------------------------------------------------------------------

$("#login-form").addEventListener("submit", async (ev) => {
  ev.preventDefault();
  state.token = $("#token").value.trim();
  setError($("#login-error"), null);
  try {
    await api("/v1/admin/channels");
  } catch (e) {
    setError(
      $("#login-error"),
      e.status === 401
        ? "That token was refused. Use the server's ADMIN_TOKEN (locally: dev-only-admin-token, from .dev.vars)."
        : e.message,
    );
    state.token = null;
    return;
  }
  sessionStorage.setItem(TOKEN_KEY, state.token);
  start();
});

$("#logout").addEventListener("click", () => {
  sessionStorage.removeItem(TOKEN_KEY);
  state.token = null;
  clearInterval(state.timer);
  for (const c of state.channels.values()) c.plot?.destroy();
  state.channels.clear();
  $("#channels").replaceChildren();
  show("#app", false);
  show("#toolbar", false);
  show("#login", true);
});

$("#sample").addEventListener("click", async () => {
  const btn = $("#sample");
  btn.disabled = true;
  try {
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
  poll();
  clearInterval(state.timer);
  state.timer = setInterval(poll, POLL_MS);
}

function handleError(e) {
  if (e.status === 401) {
    $("#logout").click();
    setError($("#login-error"), "The admin token is no longer accepted. Log in again.");
    return;
  }
  setError($("#app-error"), e.message);
}

async function poll() {
  try {
    const [list, metrics] = await Promise.all([api("/v1/admin/channels"), api("/metrics")]);
    setError($("#app-error"), null);
    $("#status").textContent = `Updated ${new Date().toLocaleTimeString()}`;
    renderDenials(typeof metrics === "string" ? metrics : "", list.now);
    show("#empty", list.channels.length === 0);
    for (const c of list.channels) renderChannel(c, list.now);
  } catch (e) {
    handleError(e);
  }
}

function renderDenials(text, now) {
  const denied = {};
  for (const m of text.matchAll(/^floodgate_rate_limit_decisions_total\{bucket="([^"]+)",result="denied"\} (\d+)$/gm)) {
    denied[m[1]] = Number(m[2]);
  }
  const prev = state.denials;
  state.denials = { at: now, denied };
  if (!prev) return;
  const secs = Math.max(0.001, (now - prev.at) / 1000);
  const parts = Object.entries(denied).map(
    ([bucket, n]) => `<span>${bucket} <b>${((n - (prev.denied[bucket] ?? 0)) / secs).toFixed(1)}</b>/s</span>`,
  );
  $("#limits").innerHTML = `<span>Rate-limit denials:</span>${parts.join("")}`;
}

function targetText(t) {
  if (t === null || t === undefined) return "none";
  return typeof t === "string" ? t : `${t.deliveries} deliveries`;
}

/** Messages per second the target allows right now, as the API computes it (null: no line). */
function targetRate(c) {
  return typeof c.target_rate === "number" ? c.target_rate : null;
}

function renderChannel(c, now) {
  let view = state.channels.get(c.channel);
  if (!view) {
    view = createCard(c.channel);
    state.channels.set(c.channel, view);
  }
  const prev = view.last;
  view.last = { at: now, delivered: c.delivered_total, dropped: c.dropped_total };
  const el = view.el;
  $(".rate", el).textContent = c.drop_rate.toFixed(3);
  $(".rate", el).classList.toggle("dropping", c.drop_rate > 0);
  $(".target", el).textContent = targetText(c.target);
  $(".occupancy", el).textContent = String(c.occupancy);
  $(".badges", el).innerHTML = `<span>${c.drop_mode}</span>`;
  const s = c.last_sample;
  $(".sample", el).textContent = s
    ? `Last sample ${new Date(s.sampled_at).toLocaleTimeString()}: offered ${s.offered_rate ?? "?"}/s, allowed ${s.allowed_rate ?? "∞"}/s → drop rate ${s.new_rate}${s.written ? "" : " (unchanged)"}`
    : "Not sampled yet (no target, or the sampler has not run since traffic began).";
  if (!prev) return;
  const secs = Math.max(0.001, (now - prev.at) / 1000);
  const delivered = Math.max(0, (c.delivered_total - prev.delivered) / secs);
  const dropped = Math.max(0, (c.dropped_total - prev.dropped) / secs);
  $(".now", el).textContent = `${delivered.toFixed(1)} / ${dropped.toFixed(1)}`;
  const d = view.data;
  d[0].push(now / 1000);
  d[1].push(delivered + dropped);
  d[2].push(delivered);
  d[3].push(dropped);
  d[4].push(targetRate(c));
  if (d[0].length > HISTORY_POINTS) for (const series of d) series.shift();
  view.plot?.setData(d);
}

function createCard(name) {
  const el = $("#channel-card").content.firstElementChild.cloneNode(true);
  el.dataset.channel = name;
  $(".name", el).textContent = name;
  $("#channels").prepend(el);
  const view = { el, last: null, data: [[], [], [], [], []], plot: null };
  const chart = $(".chart", el);
  if (window.uPlot) {
    view.plot = new window.uPlot(
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
    new ResizeObserver(() => view.plot.setSize({ width: chart.clientWidth, height: 180 })).observe(chart);
  } else {
    chart.textContent = "Chart library missing: run npm install (it copies uPlot into public/vendor).";
  }
  const cardError = $(".card-error", el);
  const act = async (fn) => {
    setError(cardError, null);
    try {
      await fn();
      await poll();
    } catch (e) {
      if (e.status === 401) return handleError(e);
      setError(cardError, e.message);
    }
  };
  const path = (what) => `/v1/admin/${what}/${encodeURIComponent(name).replace(/%3A/g, ":")}`;
  $(".set-rate", el).addEventListener("submit", (ev) => {
    ev.preventDefault();
    const rate = Number(ev.target.rate.value);
    act(() => api(path("throttle"), { method: "PUT", body: JSON.stringify({ rate }) }));
  });
  $(".clear-rate", el).addEventListener("click", () => act(() => api(path("throttle"), { method: "DELETE" })));
  $(".set-target", el).addEventListener("submit", (ev) => {
    ev.preventDefault();
    const text = ev.target.target.value.trim();
    const m = /^deliveries\s+(.+)$/i.exec(text);
    const target = m ? { deliveries: m[1] } : text;
    act(() => api(path("target"), { method: "PUT", body: JSON.stringify({ target }) }));
  });
  $(".clear-target", el).addEventListener("click", () => act(() => api(path("target"), { method: "DELETE" })));
  return view;
}

// ---- boot ---------------------------------------------------------------------------------------

if (state.token) start();
else show("#login", true);
