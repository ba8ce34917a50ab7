// The dashboard's main flows as an operator walks them: logging in, a channel appearing once traffic
// flows and its chart and drop rate moving, setting a rate from the page, the page at a phone's
// width, and the page saying so when the server is gone.
import { join } from "node:path";
import { check } from "../lib/checks.mjs";
import { artifacts, BASE, MANUAL, waitFor } from "./setup.mjs";

/**
 * The login screen: it loads (its timing printed), shows no operator buttons, refuses a wrong token
 * with a message, and with the right one (`admin`) shows the empty state.
 */
export async function checkLogin(page, admin) {
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

  await page.fill("#token", admin);
  await page.click("#login-form button");
  await page.waitForSelector("#app", { state: "visible" });
  await page.waitForSelector("#empty", { state: "visible" });
  check(true, "the right token shows the empty state, which says how to make traffic");
}

/**
 * With traffic flowing to `channel` (over its target): its card appears, its first point's chart
 * spans seconds and its legend shows values, and its drop rate rises once the sampler runs. Ends
 * with the desktop screenshot.
 */
export async function checkLiveChannel(page, channel) {
  const card = `article[data-channel="${channel}"]`;
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
}

/** A rate set from the page on MANUAL (no target) makes its publishes (`publish(channel)`) answer 202. */
export async function checkSetRate(page, publish) {
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
}

/** At a phone's width (390 px) nothing scrolls sideways, wraps or is cut. Ends with the phone screenshot. */
export async function checkPhoneWidth(page) {
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
}

/** With the server stopped (by the caller), the page says it cannot reach it. */
export async function checkServerDown(page) {
  await page.waitForFunction(() => document.querySelector("#app-error")?.textContent.includes("Cannot reach"), null, {
    timeout: 15_000,
  });
  check(true, "with the server down the page says so and what to do");
}
