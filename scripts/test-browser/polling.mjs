// The dashboard's polls and what it keeps per channel: polls never overlap, a hidden page stops
// polling, and a channel that leaves the overview takes its card, its charts and their
// ResizeObservers with it. The page is instrumented from outside its code (instrumentPage).
import { check } from "../lib/checks.mjs";

/**
 * Counts the page's overview polls (started, in flight, most at once, aborted) and its live
 * ResizeObservers, from outside the dashboard's code: fetch and ResizeObserver are wrapped before it loads.
 */
export function instrumentPage() {
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
export async function checkPolling(page) {
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
 * A channel that leaves the overview (no traffic within its window: here, its entry taken out of the
 * server's answer) loses its card and its chart's ResizeObserver; it comes back when listed again.
 */
export async function checkChannelLeaves(page, channel) {
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
