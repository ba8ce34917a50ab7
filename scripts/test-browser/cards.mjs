// What a channel's card shows: numbers from one snapshot that agree with the top line, a chart of
// the run so far for a page opened mid-run, and nothing that contradicts a target that went.
import { check } from "../lib/checks.mjs";
import { BASE } from "./setup.mjs";

/**
 * A card's numbers all come from one snapshot and agree with the top line: the card shows the drop
 * rate and rates of the overview's `snapshot` for the channel, and the top line's sampled-channel
 * rates are the sum of the snapshots (one channel here). Read against the page's own poll.
 */
export async function checkCardAgrees(page, channel) {
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
export async function checkOpenedMidRun(browser, channel, admin) {
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
export async function checkNoTargetNow(page, channel) {
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
