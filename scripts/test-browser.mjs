#!/usr/bin/env node
// `npm run test:browser`: the dashboard in a real browser (Debian's Chromium driven by playwright-core)
// against the Worker started here with `npm start` (wrangler dev, local KV and Durable Objects, the
// local sampler every 2 s). Steps: a wrong token is refused with a clear message; the right one shows
// the empty state; a channel appears once traffic flows; its drop rate rises after the sampler runs;
// a rate set from the page makes publishes answer 202; polls never overlap (each waits for the one
// before it), a hidden page aborts its poll and stops polling until shown again, and a channel that
// leaves the overview takes its card, chart and ResizeObserver with it; the page fits a phone's width; a browser's
// WebSocket subscriber gets frames without compression, and one offering its token as a subprotocol
// reads a private channel (straight to the Worker); the page and its script carry public/_headers'
// CSP and the page runs with no CSP violation; with the server stopped the page says so. Also: a chart
// with one point spans seconds, not years, and its legend shows the newest values; a card's numbers
// are its snapshot's and agree with the top line; a page opened mid-run charts the run so far; bad
// configuration shows a banner; at 390 px no label wraps and the target placeholder fits. Screenshots go
// to test-artifacts/. Needs /usr/bin/chromium (`apt-get install -y chromium`; .ci/run does it).
import { existsSync, mkdirSync } from "node:fs";
import { join } from "node:path";
import { chromium } from "playwright-core";
import { startDev } from "./lib/dev-server.mjs";
import { options } from "./lib/options.mjs";
import { root } from "./lib/root.mjs";
import { mintToken } from "./lib/tokens.mjs";
import { startFloodgate } from "./lib/workerd.mjs";

options("test:browser", {});
// BROWSER_TEST_PORT / BROWSER_TEST_INSPECTOR_PORT: so two runs on one machine do not collide.
const PORT = Number(process.env.BROWSER_TEST_PORT ?? 8797);
const INSPECTOR_PORT = process.env.BROWSER_TEST_INSPECTOR_PORT;
const BASE = `http://127.0.0.1:${PORT}`;
const CHANNEL = "public:live.browser";
// No target: the sampler leaves its rate alone, so a rate set from the page stays set. (On CHANNEL the
// next sample, every 2 s here, would overwrite it, which made this check flaky.)
const MANUAL = "public:live.manual";
const CHROMIUM = process.env.CHROMIUM_PATH ?? "/usr/bin/chromium";
const artifacts = join(root, "test-artifacts");
mkdirSync(artifacts, { recursive: true });

if (!existsSync(CHROMIUM)) {
  console.error(`test:browser: no Chromium at ${CHROMIUM}; install it with: apt-get install -y chromium`);
  process.exit(1);
}

/**
 * A browser offers permessage-deflate on every WebSocket; the Worker declines it (wrangler.toml
 * `no_web_socket_compression`) so a fan-out never compresses each frame once per subscriber. wrangler
 * dev's proxy answers the browser's upgrade itself, so this check talks to the Worker straight through
 * a workerd direct socket (scripts/lib/workerd.mjs), as the edge would.
 */
async function checkUncompressedFrames(browser) {
  const worker = await startFloodgate({});
  // A page of no origin: the dashboard's CSP (rightly) allows it no socket to another origin.
  const page = await browser.newPage();
  try {
    const channel = "public:live.socket";
    await page.evaluate(
      (url) =>
        new Promise((resolve, reject) => {
          const ws = new WebSocket(url);
          window.__frame = new Promise((got) => {
            ws.onmessage = (e) => got({ extensions: ws.extensions, type: JSON.parse(e.data).type });
          });
          ws.onopen = resolve;
          ws.onerror = () => reject(new Error("subscribe socket failed"));
        }),
      `${worker.base.replace(/^http/, "ws")}/v1/subscribe/${channel}`,
    );
    const token = await mintToken(worker, { sub: "browser-socket", channels: ["public:live.*"] });
    const res = await fetch(`${worker.base}/v1/publish/${channel}`, {
      method: "POST",
      headers: { authorization: `Bearer ${token}`, "content-type": "application/json" },
      body: JSON.stringify({ hello: 1 }),
    });
    const frame = await page.evaluate(() => window.__frame);
    check(
      res.status === 200 && frame.type === "message" && frame.extensions === "",
      `a browser's WebSocket subscriber gets its frames uncompressed (extensions ${JSON.stringify(frame.extensions)})`,
    );

    // A private channel, the token offered as a subprotocol instead of in the URL.
    const privateChannel = "private:live.socket.secret";
    const privateToken = await mintToken(worker, { sub: "browser-private", channels: ["private:live.socket.*"] });
    const protocol = await page.evaluate(
      ({ url, token }) =>
        new Promise((resolve, reject) => {
          const ws = new WebSocket(url, ["floodgate", `bearer.${token}`]);
          window.__privateFrame = new Promise((got) => {
            ws.onmessage = (e) => got(JSON.parse(e.data).data);
          });
          ws.onopen = () => resolve(ws.protocol);
          ws.onerror = () => reject(new Error("private subscribe socket failed"));
        }),
      { url: `${worker.base.replace(/^http/, "ws")}/v1/subscribe/${privateChannel}`, token: privateToken },
    );
    await fetch(`${worker.base}/v1/publish/${privateChannel}`, {
      method: "POST",
      headers: { authorization: `Bearer ${privateToken}`, "content-type": "application/json" },
      body: JSON.stringify({ secret: 1 }),
    });
    const privateFrame = await page.evaluate(() => window.__privateFrame);
    check(
      protocol === "floodgate" && privateFrame?.secret === 1,
      `a browser WebSocket sends its token as the bearer.<token> subprotocol and gets "floodgate" back (got ${JSON.stringify(protocol)})`,
    );
  } finally {
    await page.close();
    await worker.stop();
  }
}

/** The dashboard's files carry the headers of public/_headers (served by the assets layer). */
async function checkAssetHeaders() {
  for (const path of ["/", "/app.js"]) {
    const res = await fetch(`${BASE}${path}`);
    await res.arrayBuffer();
    const csp = res.headers.get("content-security-policy") ?? "";
    check(
      res.status === 200 &&
        csp.includes("script-src 'self'") &&
        csp.includes("frame-ancestors 'none'") &&
        res.headers.get("x-content-type-options") === "nosniff" &&
        res.headers.get("x-frame-options") === "DENY",
      `${path} carries the dashboard's CSP, nosniff and X-Frame-Options (CSP ${JSON.stringify(csp)})`,
    );
  }
  const headersFile = await fetch(`${BASE}/_headers`);
  const text = await headersFile.text();
  check(!text.includes("Content-Security-Policy"), "public/_headers itself is not served");
  const tsconfig = await fetch(`${BASE}/tsconfig.json`);
  check(!(await tsconfig.text()).includes("compilerOptions"), "public/tsconfig.json is not served (.assetsignore)");
}

/**
 * Counts the page's overview polls (started, in flight, most at once, aborted) and its live
 * ResizeObservers, from outside the dashboard's code: fetch and ResizeObserver are wrapped before it loads.
 */
function instrumentPage() {
  const polls = { started: 0, inFlight: 0, most: 0, aborted: 0 };
  window.__polls = polls;
  const fetch = window.fetch.bind(window);
  window.fetch = (input, init) => {
    if (!String(input).includes("/v1/admin/overview")) return fetch(input, init);
    polls.started++;
    polls.inFlight++;
    polls.most = Math.max(polls.most, polls.inFlight);
    let settled = false;
    const settle = () => {
      if (!settled) polls.inFlight--;
      settled = true;
    };
    init?.signal?.addEventListener("abort", () => {
      if (!settled) polls.aborted++;
      settle();
    });
    return fetch(input, init).finally(settle);
  };
  const observers = new Set();
  window.__observers = observers;
  const Native = window.ResizeObserver;
  window.ResizeObserver = class extends Native {
    observe(target, options) {
      observers.add(this);
      super.observe(target, options);
    }
    disconnect() {
      observers.delete(this);
      super.disconnect();
    }
  };
}

/** Pretends the page was hidden (`hidden`) or shown again, as switching tabs does. */
function setHidden(hidden) {
  Object.defineProperty(document, "visibilityState", { value: hidden ? "hidden" : "visible", configurable: true });
  Object.defineProperty(document, "hidden", { value: hidden, configurable: true });
  document.dispatchEvent(new Event("visibilitychange"));
}

const pollCounts = (page) => page.evaluate(() => ({ ...window.__polls }));

/**
 * With the server slow (each overview answered 3 s late, longer than the 2 s between polls), polls
 * still run one at a time; hiding the page aborts the poll in flight and starts no other until shown.
 */
async function checkPolling(page) {
  const slow = async (route) => {
    await new Promise((r) => setTimeout(r, 3000));
    await route.continue().catch(() => {}); // an aborted poll's request is gone
  };
  await page.route("**/v1/admin/overview*", slow);
  await page.evaluate(() => {
    window.__polls.most = window.__polls.inFlight;
    window.__polls.started = 0;
  });
  await page.waitForTimeout(10_000);
  const busy = await pollCounts(page);
  check(
    busy.most === 1 && busy.started >= 1 && busy.started <= 3,
    `polls never overlap when the server is slower than the poll period (${busy.started} polls in 10 s, at most ${busy.most} at once)`,
  );

  // Hidden in the same page task that saw a poll in flight: waiting for it from here and hiding in a
  // second call left a gap in which that poll could finish, and then nothing was aborted.
  const hidden = await page.evaluate(async () => {
    const end = Date.now() + 10_000;
    while (window.__polls.inFlight !== 1) {
      if (Date.now() > end) throw new Error("no overview poll in flight");
      await new Promise((r) => setTimeout(r, 5));
    }
    Object.defineProperty(document, "visibilityState", { value: "hidden", configurable: true });
    Object.defineProperty(document, "hidden", { value: true, configurable: true });
    const abortedBefore = window.__polls.aborted; // earlier polls were aborted by the rate set above
    document.dispatchEvent(new Event("visibilitychange"));
    return { ...window.__polls, abortedNow: window.__polls.aborted - abortedBefore };
  });
  await page.waitForTimeout(5000);
  const later = await pollCounts(page);
  check(
    hidden.inFlight === 0 && hidden.abortedNow === 1 && later.started === hidden.started,
    `a hidden page aborts its poll and polls no more (${later.started - hidden.started} polls while hidden)`,
  );
  await page.unroute("**/v1/admin/overview*", slow);
  await page.evaluate(setHidden, false);
  await page.waitForFunction((n) => window.__polls.started > n, later.started, { timeout: 5000 });
  check(true, "shown again, the page polls again at once");
}

/**
 * A card's numbers all come from one snapshot and agree with the top line: the card shows the drop
 * rate and rates of the overview's `snapshot` for the channel, and the top line's sampled-channel
 * rates are the sum of the snapshots (one channel here). Read against the page's own poll.
 */
async function checkCardAgrees(page, channel) {
  const card = `article[data-channel="${channel}"]`;
  const res = await page.waitForResponse((r) => r.url().includes("/v1/admin/overview") && r.ok(), {
    timeout: 10_000,
  });
  const body = await res.json();
  const snap = body.channels.find((c) => c.channel === channel)?.snapshot;
  const sampled = body.channels.map((c) => c.snapshot).filter(Boolean);
  const sum = (k) => sampled.reduce((n, p) => n + p[k], 0).toFixed(1);
  const expected = {
    rate: snap.drop_rate.toFixed(3),
    delivered: snap.delivered_rate.toFixed(1),
    dropped: snap.dropped_rate.toFixed(1),
    top: `delivered ${sum("delivered_rate")}/s`,
  };
  // The page renders the answer right after this response: wait for its text, then compare.
  const shown = await page
    .waitForFunction(
      ([sel, want]) => {
        const text = (c) => document.querySelector(`${sel} ${c}`)?.textContent ?? "";
        const got = {
          rate: text(".rate"),
          delivered: text(".delivered"),
          dropped: text(".dropped"),
          top: document.querySelector("#limits")?.textContent ?? "",
        };
        return got.rate === want.rate &&
          got.delivered === want.delivered &&
          got.dropped === want.dropped &&
          got.top.includes(want.top)
          ? got
          : null;
      },
      [card, expected],
      { timeout: 5_000 },
    )
    .then(
      (h) => h.jsonValue(),
      () => null,
    );
  check(
    shown !== null,
    `a card's drop rate, delivered/s and dropped/s are its snapshot's, and the top line sums them (${JSON.stringify(expected)})`,
  );
}

/**
 * A page opened mid-run shows the run: its first poll already charts every point the server kept for
 * the channel (both loops' decisions since the run began), not only what it polls from then on.
 */
async function checkOpenedMidRun(browser, channel, admin) {
  const page = await browser.newPage({ viewport: { width: 1200, height: 900 } });
  const overview = await (
    await fetch(`${BASE}/v1/admin/overview`, { headers: { authorization: `Bearer ${admin}` } })
  ).json();
  const kept = overview.channels.find((c) => c.channel === channel)?.series ?? [];
  await page.goto(BASE);
  await page.fill("#token", admin);
  await page.click("#login-form button");
  const chart = `article[data-channel="${channel}"] .chart`;
  await page.waitForSelector(`${chart}[data-points]`, { timeout: 10_000 });
  const points = Number(await page.getAttribute(chart, "data-points"));
  const kinds = new Set(kept.map((p) => p.by));
  check(
    points >= kept.length && kept.length >= 3 && kinds.has("fast loop") && kinds.has("sweep"),
    `a page opened mid-run charts the run so far at once: ${points} points on its first poll (the server kept ${kept.length}, of ${[...kinds].join(" and ")})`,
  );
  await page.close();
}

/**
 * A channel whose target went (a restart without it): the card says "none" and nothing contradicts
 * it — no "allowed 20/s" beside it, no target line — while its last decision stays as history. The
 * server's answer is the real one with the target taken out.
 */
async function checkNoTargetNow(page, channel) {
  const card = `article[data-channel="${channel}"]`;
  const untarget = async (route) => {
    const response = await route.fetch();
    const body = await response.json();
    for (const c of body.channels) if (c.channel === channel) Object.assign(c, { target: null, target_rate: null });
    await route.fulfill({ response, json: body });
  };
  await page.route("**/v1/admin/overview*", untarget);
  await page.waitForFunction((sel) => document.querySelector(`${sel} .target`)?.textContent === "none", card, {
    timeout: 10_000,
  });
  const shown = await page.evaluate(
    (sel) => ({
      sample: document.querySelector(`${sel} .sample`)?.textContent ?? "",
      delivered: document.querySelector(`${sel} .delivered`)?.textContent,
      legend: [...document.querySelectorAll(`${sel} .u-legend .u-series`)].at(-1)?.textContent ?? "",
    }),
    card,
  );
  check(
    shown.sample.startsWith("No target now") && shown.delivered === "—" && !/target\D*\d/.test(shown.legend),
    `with its target gone the card says none and nothing beside it says otherwise (${shown.sample.slice(0, 60)}…; legend "${shown.legend}")`,
  );
  await page.unroute("**/v1/admin/overview*", untarget);
}

/**
 * Bad configuration: every route answers 500 naming the variable (src/worker/app.ts); the page shows a
 * banner with the message, on the login screen too, for as long as it lasts, and drops it with the
 * first good answer. The answer is the Worker's own shape, served here for the overview only.
 */
async function checkConfigBanner(page) {
  const bad = {
    code: "internal",
    msg: 'invalid configuration: PUBLISH_RATE: "abc" is not a rate: expected <integer>/<window> such as 500/s',
    meta: { code: "INTERNAL", variable: "PUBLISH_RATE" },
  };
  const refuse = (route) => route.fulfill({ status: 500, json: bad });
  await page.route("**/v1/admin/overview*", refuse);
  await page.waitForSelector("#config-banner", { state: "visible", timeout: 10_000 });
  const text = await page.textContent("#config-banner");
  check(
    text.includes(bad.msg) && text.includes("wrangler.toml"),
    "bad configuration shows a banner with the server's message and where to fix it",
  );
  const errorLine = await page.isVisible("#app-error");
  check(!errorLine, "… instead of the error line");
  await page.unroute("**/v1/admin/overview*", refuse);
  await page.waitForSelector("#config-banner", { state: "hidden", timeout: 10_000 });
  check(true, "… and the banner goes with the first good answer");
}

/**
 * A channel that leaves the overview (no traffic within its window: here, its entry taken out of the
 * server's answer) loses its card and its chart's ResizeObserver; it comes back when listed again.
 */
async function checkChannelLeaves(page, channel) {
  const card = `article[data-channel="${channel}"]`;
  const observersBefore = await page.evaluate(() => window.__observers.size);
  const charts = await page.locator(".channel .uplot").count();
  // Each chart of the card (its rates, and its occupancy) has one observer: all of them go with it.
  const own = await page.locator(`${card} .uplot`).count();
  const without = async (route) => {
    const response = await route.fetch();
    const body = await response.json();
    body.channels = body.channels.filter((c) => c.channel !== channel);
    await route.fulfill({ response, json: body });
  };
  await page.route("**/v1/admin/overview*", without);
  await page.waitForSelector(card, { state: "detached", timeout: 10_000 });
  const observersAfter = await page.evaluate(() => window.__observers.size);
  const chartsAfter = await page.locator(".channel .uplot").count();
  check(
    own > 0 && observersAfter === observersBefore - own && chartsAfter === charts - own,
    `a channel leaving the overview removes its card, its ${own} charts and their ResizeObservers (observers ${observersBefore} → ${observersAfter}, charts ${charts} → ${chartsAfter})`,
  );
  await page.unroute("**/v1/admin/overview*", without);
  await page.waitForSelector(card, { timeout: 10_000 });
  check(true, "listed again, the channel gets its card back");
}

let failures = 0;
function check(ok, what) {
  console.log(`${ok ? "ok  " : "FAIL"} ${what}`);
  if (!ok) failures++;
}

const server = startDev({
  port: PORT,
  args: [
    "--var",
    `THROTTLE_TARGETS:${JSON.stringify({ [CHANNEL]: "5/s" })}`,
    "--var",
    "THROTTLE_RATE_CACHE_MS:200",
    ...(INSPECTOR_PORT ? ["--inspector-port", INSPECTOR_PORT] : []),
  ],
  env: { SAMPLER_LOCAL_PERIOD: "2" },
});
const stopServer = server.stop;

async function waitFor(fn, what, ms = 30_000) {
  const end = Date.now() + ms;
  for (;;) {
    try {
      const v = await fn();
      if (v) return v;
    } catch {}
    if (Date.now() > end) throw new Error(`timed out: ${what}`);
    await new Promise((r) => setTimeout(r, 200));
  }
}

let browser;
let publishing = true;
try {
  await server.ready(60_000);
  const token = await mintToken(server, { sub: "browser-test", channels: [CHANNEL, MANUAL], rl: "1000/s" });
  const publish = (channel = CHANNEL) =>
    fetch(`${BASE}/v1/publish/${channel}`, {
      method: "POST",
      headers: { authorization: `Bearer ${token}`, "content-type": "application/json" },
      body: JSON.stringify({ emoji: "🔥" }),
    }).then(async (r) => {
      await r.arrayBuffer();
      return r.status;
    });

  browser = await chromium.launch({ executablePath: CHROMIUM, args: ["--headless", "--no-sandbox", "--disable-gpu"] });
  const page = await browser.newPage({ viewport: { width: 1200, height: 900 } });
  await page.addInitScript(instrumentPage);
  // Every CSP violation the page reports (a blocked script, style or request), checked at the end.
  await page.addInitScript(() => {
    window.__cspViolations = [];
    document.addEventListener("securitypolicyviolation", (e) =>
      window.__cspViolations.push(`${e.violatedDirective} ${e.blockedURI}`),
    );
  });
  await checkAssetHeaders();
  const t0 = Date.now();
  await page.goto(BASE);
  await page.waitForSelector("#login-form", { state: "visible" });
  const loaded = await page.evaluate(() => performance.getEntriesByType("navigation")[0]?.loadEventEnd ?? -1);
  console.log(`     page load: ${Math.round(loaded)} ms (navigation timing), ${Date.now() - t0} ms to the login form`);
  check(
    !(await page.isVisible("#sample")) && !(await page.isVisible("#logout")),
    "the login screen shows no operator buttons (Run sampler now, Log out)",
  );

  await page.fill("#token", "wrong-token");
  await page.click("#login-form button");
  await page.waitForSelector("#login-error", { state: "visible" });
  check(
    (await page.textContent("#login-error")).includes("refused"),
    "a wrong token is refused with a message saying what to do",
  );

  await page.fill("#token", server.admin);
  await page.click("#login-form button");
  await page.waitForSelector("#app", { state: "visible" });
  await page.waitForSelector("#empty", { state: "visible" });
  check(true, "the right token shows the empty state, which says how to make traffic");

  // ~25 publishes/s against a 5/s target, in the background.
  const traffic = (async () => {
    while (publishing) {
      await Promise.all([publish(), publish(), publish(), publish(), publish()]);
      await new Promise((r) => setTimeout(r, 200));
    }
  })();
  const card = `article[data-channel="${CHANNEL}"]`;
  await page.waitForSelector(card, { timeout: 15_000 });
  check(true, "the channel appears once traffic flows");
  // Its first point: a time axis of seconds around it, not uPlot's years around one timestamp.
  await page.waitForSelector(`${card} .chart[data-points="1"], ${card} .chart[data-points="2"]`, { timeout: 20_000 });
  const span = Number(await page.getAttribute(`${card} .chart`, "data-span"));
  check(span > 0 && span <= 60, `with one or two points the time axis spans ${span} s (not years)`);
  const legend = await page.locator(`${card} .u-legend .u-value`).allTextContents();
  check(
    legend.length > 0 && legend.every((v) => v !== "--"),
    `the legend shows the newest values without hovering (${legend.join(", ")})`,
  );
  await page.waitForFunction((sel) => Number(document.querySelector(`${sel} .rate`)?.textContent) > 0.3, card, {
    timeout: 20_000,
  });
  check(true, `the drop rate rises after the sampler runs (now ${await page.textContent(`${card} .rate`)})`);
  check(
    await page.evaluate((sel) => document.querySelector(`${sel} .rate`)?.classList.contains("dropping"), card),
    "a drop rate above 0 is marked as dropping (an idle 0.000 is not)",
  );
  await page.waitForTimeout(8000); // let the chart gather a few points for the screenshot
  await page.screenshot({ path: join(artifacts, "dashboard.png"), fullPage: true });
  await checkCardAgrees(page, CHANNEL);
  await checkNoTargetNow(page, CHANNEL);
  await checkOpenedMidRun(browser, CHANNEL, server.admin);

  publishing = false;
  await traffic;
  const manual = `article[data-channel="${MANUAL}"]`;
  await Promise.all([publish(MANUAL), publish(MANUAL)]);
  await page.waitForSelector(manual, { timeout: 15_000 });
  await page.fill(`${manual} .set-rate input`, "1");
  await page.click(`${manual} .set-rate button[type=submit]`);
  await page.waitForFunction((sel) => document.querySelector(`${sel} .rate`)?.textContent === "1.000", manual, {
    timeout: 10_000,
  });
  const statuses = await waitFor(async () => {
    const s = await Promise.all([publish(MANUAL), publish(MANUAL), publish(MANUAL)]);
    return s.every((x) => x === 202) ? s : null;
  }, "publishes to answer 202");
  check(
    statuses.every((s) => s === 202),
    "a rate set from the page makes publishes answer 202",
  );

  await checkPolling(page);
  await checkChannelLeaves(page, MANUAL);
  await checkConfigBanner(page);

  await page.setViewportSize({ width: 390, height: 844 });
  // The charts shrink in their ResizeObserver's callback, which runs at the page's next rendering, not
  // by a fixed time: wait until every chart is no wider than its card (a fixed 300 ms raced it).
  await page.waitForFunction(
    () =>
      [...document.querySelectorAll(".chart")].every((c) => (c.firstElementChild?.clientWidth ?? 0) <= c.clientWidth),
    null,
    { timeout: 10_000 },
  );
  const fits = await page.evaluate(() => document.documentElement.scrollWidth <= window.innerWidth + 1);
  check(fits, "at phone width (390 px) nothing scrolls sideways");
  // Every fact's label on one line, and the target's placeholder whole in its field.
  const layout = await page.evaluate(() => ({
    wrapped: [...document.querySelectorAll(".facts dt")]
      .filter((dt) => dt.scrollWidth > dt.clientWidth + 1 || dt.getClientRects().length > 1)
      .map((dt) => dt.textContent),
    placeholder: [...document.querySelectorAll(".set-target input")].every((i) => {
      const ctx = document.createElement("canvas").getContext("2d");
      ctx.font = getComputedStyle(i).font;
      return ctx.measureText(i.placeholder).width <= i.clientWidth;
    }),
  }));
  check(layout.wrapped.length === 0, `at 390 px no fact label wraps or is cut (${layout.wrapped.join(", ")})`);
  check(layout.placeholder, "at 390 px the target field shows its whole placeholder");
  await page.screenshot({ path: join(artifacts, "dashboard-phone.png"), fullPage: true });
  console.log(`     screenshots: test-artifacts/dashboard.png, test-artifacts/dashboard-phone.png`);

  const violations = await page.evaluate(() => window.__cspViolations);
  check(violations.length === 0, `the dashboard runs under its CSP with no violation (${JSON.stringify(violations)})`);

  await checkUncompressedFrames(browser);

  stopServer();
  await page.waitForFunction(() => document.querySelector("#app-error")?.textContent.includes("Cannot reach"), null, {
    timeout: 15_000,
  });
  check(true, "with the server down the page says so and what to do");
} catch (e) {
  failures++;
  console.error(`FAIL ${e.message}`);
  console.error(server.log().split("\n").slice(-30).join("\n"));
} finally {
  publishing = false;
  await browser?.close();
  stopServer();
}
console.log(failures ? `test:browser: ${failures} failed` : "test:browser: all passed");
process.exit(failures ? 1 : 0);
