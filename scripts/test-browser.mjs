#!/usr/bin/env node
// `npm run test:browser`: the dashboard in a real browser (Debian's Chromium driven by playwright-core)
// against the Worker started here with `npm start` (wrangler dev, local KV and Durable Objects, the
// local sampler every 2 s). Steps: a wrong token is refused with a clear message; the right one shows
// the empty state; a channel appears once traffic flows; its drop rate rises after the sampler runs;
// a rate set from the page makes publishes answer 202; polls never overlap (each waits for the one
// before it), a hidden page aborts its poll and stops polling until shown again, and a channel that
// leaves the overview takes its card, chart and ResizeObserver with it; the page fits a phone's width; a browser's
// WebSocket subscriber gets frames without compression, and one offering its token as a subprotocol
// reads a private channel (straight to the Worker); pusher-js in the browser subscribes one connection
// to a public and a private channel and receives pusher.trigger's event; the page and its script carry public/_headers'
// CSP and the page runs with no CSP violation; with the server stopped the page says so. Also: a chart
// with one point spans seconds, not years, and its legend shows the newest values; a card's numbers
// are its snapshot's and agree with the top line; a page opened mid-run charts the run so far; bad
// configuration shows a banner; at 390 px no label wraps and the target placeholder fits. At a glance
// (glance.mjs): the drop rate is plotted, each figure says how old it is, subscribers are counted (and
// a count that fell to 0 during a period says what it was), lines break where nothing was measured, an
// idle channel is dimmed and left out of the top line, which names its window, a sharded card adds up
// its shards, the subscribers chart has a whole-number scale, time axes read well at every span and
// width, and the drop mode's badge says what it means. A page on an origin in CORS_ORIGINS uses the
// client (publish, history, presence, WebSocket, SSE fallback) and a page on another origin is
// refused. Screenshots go to test-artifacts/. Needs /usr/bin/chromium (`apt-get install -y
// chromium`; .ci/run does it).
//
// The parts, in scripts/test-browser/: setup.mjs (the Worker, the browser, the channels; each check reports through lib/checks.mjs),
// dashboard.mjs (logging in, a live channel, setting a rate, a phone's width, the server gone),
// cards.mjs (what a channel's card shows), glance.mjs (what the dashboard tells at a glance),
// polling.mjs (polls and what a channel leaving takes with it), config-banner.mjs (bad configuration),
// headers.mjs (security headers and CSP), sockets.mjs (a browser's WebSocket straight to the Worker),
// pusher.mjs (pusher-js's web build against the Pusher door), cross-origin.mjs (a web app on another
// origin).
import { mkdirSync } from "node:fs";
import { fail, finish } from "./lib/checks.mjs";
import { options } from "./lib/options.mjs";
import { mintToken } from "./lib/tokens.mjs";
import { checkCardAgrees, checkNoTargetNow, checkOpenedMidRun } from "./test-browser/cards.mjs";
import { checkConfigBanner } from "./test-browser/config-banner.mjs";
import { checkCrossOrigin } from "./test-browser/cross-origin.mjs";
import {
  checkLiveChannel,
  checkLogin,
  checkPhoneWidth,
  checkServerDown,
  checkSetRate,
} from "./test-browser/dashboard.mjs";
import { checkDropRateAndAges, checkMadeUpRun, checkSubscribersCounted } from "./test-browser/glance.mjs";
import { checkAssetHeaders, checkNoCspViolation, watchCspViolations } from "./test-browser/headers.mjs";
import { checkChannelLeaves, checkPolling, instrumentPage } from "./test-browser/polling.mjs";
import { checkPusherJs } from "./test-browser/pusher.mjs";
import {
  artifacts,
  BASE,
  CHANNEL,
  launchBrowser,
  MANUAL,
  requireChromium,
  startServer,
} from "./test-browser/setup.mjs";
import { checkUncompressedFrames } from "./test-browser/sockets.mjs";

options("test:browser", {});
mkdirSync(artifacts, { recursive: true });
requireChromium();

const server = startServer();
const stopServer = server.stop;

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

  browser = await launchBrowser();
  const page = await browser.newPage({ viewport: { width: 1200, height: 900 } });
  await page.addInitScript(instrumentPage);
  await watchCspViolations(page);
  await checkAssetHeaders();
  await checkLogin(page, server.admin);

  // ~25 publishes/s against a 5/s target, in the background.
  const traffic = (async () => {
    while (publishing) {
      await Promise.all([publish(), publish(), publish(), publish(), publish()]);
      await new Promise((r) => setTimeout(r, 200));
    }
  })();
  await checkLiveChannel(page, CHANNEL);
  await checkDropRateAndAges(page, CHANNEL);
  await checkSubscribersCounted(page, CHANNEL, server.admin);
  await checkCardAgrees(page, CHANNEL);
  await checkNoTargetNow(page, CHANNEL);
  await checkOpenedMidRun(browser, CHANNEL, server.admin);
  publishing = false;
  await traffic;

  await checkMadeUpRun(page, 1200);
  await checkMadeUpRun(page, 390);
  await page.setViewportSize({ width: 1200, height: 900 });

  await checkSetRate(page, publish);
  await checkPolling(page);
  await checkChannelLeaves(page, MANUAL);
  await checkConfigBanner(page);
  await checkPhoneWidth(page);
  await checkNoCspViolation(page);

  await checkUncompressedFrames(browser);
  await checkPusherJs(browser);
  await checkCrossOrigin(browser);

  stopServer();
  await checkServerDown(page);
} catch (e) {
  fail(e.message);
  console.error(server.log().split("\n").slice(-30).join("\n"));
} finally {
  publishing = false;
  await browser?.close();
  stopServer();
}
finish("test:browser");
