// The dashboard tells the truth at a glance: the drop rate plotted over time, each figure's age, the
// subscribers the channel really has (and had, when they left during a period), time axes whose labels
// read well at every span and width, lines broken where no period was measured, a subscribers chart
// with a usable scale, a top line that sums only recent periods and says its window, and the drop
// mode's badge explained. Live where the server can show it; on a made-up run (the real answer with its
// channels replaced) for what takes minutes: a gap, an idle channel, a sharded one, a 10-minute span.
import { join } from "node:path";
import { check } from "../lib/checks.mjs";
import { artifacts, BASE, waitFor } from "./setup.mjs";

const OVERVIEW = "**/v1/admin/overview*";

/** The page's next overview answer (its own poll), as JSON. */
async function nextOverview(page) {
  const res = await page.waitForResponse((r) => r.url().includes("/v1/admin/overview") && r.ok(), {
    timeout: 10_000,
  });
  return res.json();
}

/**
 * Whether a chart's time axis reads well, from what its axis recorded on the element: ticks a whole
 * second or more apart, more room between two ticks than the widest label takes, one line per label
 * and no label twice.
 */
async function axisReadsWell(page, selector) {
  const d = await page.$eval(selector, (el) => ({ ...el.dataset }));
  const labels = JSON.parse(d.xticks ?? "[]");
  const step = Number(d.xstep);
  const ok =
    labels.length >= 1 &&
    Number.isInteger(step) &&
    step >= 1 &&
    Number(d.xgap) > Number(d.xlabel) &&
    labels.every((l) => !l.includes("\n") && !/\d[.,]\d/.test(l)) &&
    new Set(labels).size === labels.length;
  return { ok, detail: `${labels.join(" | ")}; every ${step} s, ${d.xgap} px apart for labels ≤ ${d.xlabel} px` };
}

/**
 * The decision in force when period `p` began, as the page finds it (public/periods.js `pointBefore`).
 */
function pointBefore(series, p) {
  const start = p.at - p.elapsed_ms;
  const q = series.findLast((x) => x !== p && x.at <= start + 1000);
  return q && start - q.at <= 1000 ? q : null;
}

/**
 * Live, with traffic over its target: the drop rate is a series of the chart whose newest value is
 * the card's; the four figures of the card's period each say how old they are, all the same age, no
 * older than the period (the server's `now` less its end); the time axis of a short run reads well.
 */
export async function checkDropRateAndAges(page, channel) {
  const card = `article[data-channel="${channel}"]`;
  const body = await nextOverview(page);
  const p = body.channels.find((x) => x.channel === channel).snapshot;
  const age = Math.round((body.now - p.at) / 1000);
  const want = p.drop_rate.toFixed(3);
  const shown = await page
    .waitForFunction(
      ([sel, want]) => {
        const series = [...document.querySelectorAll(`${sel} .chart .u-legend .u-series`)].map((s) => s.textContent);
        const rate = series.find((s) => s.startsWith("drop rate"));
        const ages = [...document.querySelectorAll(`${sel} .facts dd.age`)].map((a) => a.textContent);
        return rate?.endsWith(want) ? { rate, ages } : null;
      },
      [card, want],
      { timeout: 5_000 },
    )
    .then(
      (h) => h.jsonValue(),
      () => null,
    );
  check(shown !== null, `the drop rate is plotted over time: the chart's newest "drop rate" is the card's ${want}`);
  const ages = shown?.ages ?? [];
  // Drop rate, subscribers, delivered/s, dropped/s: "set 3 s ago", "3 s ago", … (the target: "now").
  const seconds = [0, 2, 3, 4].map((i) => /^(?:set )?(\d+) s ago|^(?:set )?(now)/.exec(ages[i] ?? ""));
  const same = seconds.every((m) => m) && new Set(seconds.map((m) => m[1] ?? "0")).size === 1;
  const n = Number(seconds[0]?.[1] ?? 0);
  check(
    same && ages[1] === "now" && n >= age && n <= age + 6,
    `each figure says how old it is, all of one period: ${ages.join(" · ")} (that period ended ${age} s before the poll)`,
  );
  const axis = await axisReadsWell(page, `${card} .chart`);
  check(axis.ok, `a short run's time axis reads well: ${axis.detail}`);
}

/**
 * Live: subscribers the channel has are the card's (two WebSockets held open while it delivers), and
 * when they leave during a period the card says so beside that period's rate: the server's first
 * period that ended with none after beginning with some (the run cut there, shown to the page as it
 * was) reads "0 … was 2" (or 1), not a bare 0 next to a rate delivered to them.
 */
export async function checkSubscribersCounted(page, channel, admin) {
  const card = `article[data-channel="${channel}"]`;
  const url = `${BASE.replace(/^http/, "ws")}/v1/subscribe/${channel}`;
  const openedAt = Date.now();
  const sockets = await Promise.all(
    [1, 2].map(
      () =>
        new Promise((resolve, reject) => {
          const ws = new WebSocket(url);
          ws.onopen = () => resolve(ws);
          ws.onerror = () => reject(new Error("subscriber socket failed"));
        }),
    ),
  );
  const both = await page
    .waitForFunction(
      (sel) => {
        const text = (c) => document.querySelector(`${sel} ${c}`)?.textContent;
        return text(".occupancy") === "2" && Number(text(".delivered")) > 0
          ? `${text(".occupancy")} beside ${text(".delivered")}/s`
          : null;
      },
      card,
      { timeout: 20_000 },
    )
    .then(
      (h) => h.jsonValue(),
      () => null,
    );
  check(both !== null, `with 2 subscribers open the card reads them beside the rate it delivers (${both})`);
  // Held open until the server measured them 6 s after they opened: longer than its longest period
  // (the fast loop's 5 s), so the first period that ends with none began with them. Closed sooner,
  // they may have come and gone within one period, and no period begins with them.
  await waitFor(async () => {
    const res = await fetch(`${BASE}/v1/admin/overview`, { headers: { authorization: `Bearer ${admin}` } });
    const c = (await res.json()).channels.find((x) => x.channel === channel);
    return (c?.series ?? []).some((p) => p.occupancy === 2 && p.at >= openedAt + 6000);
  }, "a period measured with both subscribers 6 s after they opened");
  for (const ws of sockets) ws.close();
  const left = await waitFor(async () => {
    const res = await fetch(`${BASE}/v1/admin/overview`, { headers: { authorization: `Bearer ${admin}` } });
    const body = await res.json();
    const c = body.channels.find((x) => x.channel === channel);
    const series = c?.series ?? [];
    // The two may close in different periods (2 → 1 → 0): the one that ended with none began with 1 or 2.
    const i = series.findIndex((p) => p.occupancy === 0 && pointBefore(series, p)?.occupancy > 0);
    if (i < 0) return null;
    const cut = series.slice(0, i + 1);
    Object.assign(c, { series: cut, snapshot: cut.at(-1) });
    return { body: { ...body, now: cut.at(-1).at + 1000 }, began: pointBefore(cut, cut.at(-1)).occupancy };
  }, "a period that began with subscribers and ended with none");
  const frozen = (route) => route.fulfill({ json: left.body });
  await page.route(OVERVIEW, frozen);
  const line = await page
    .waitForFunction(
      ([sel, began]) => {
        const box = document.querySelector(`${sel} .occupancy`)?.parentElement;
        const age = box?.querySelector(".age")?.textContent ?? "";
        return box?.querySelector(".occupancy")?.textContent === "0" && age.includes(`was ${began}`) ? age : null;
      },
      [card, left.began],
      { timeout: 10_000 },
    )
    .then(
      (h) => h.jsonValue(),
      () => null,
    );
  await page.unroute(OVERVIEW, frozen);
  check(line !== null, `subscribers who left during a period: the card reads 0 with "${line}", not a bare 0`);
}

/**
 * A made-up run, `now` being the server's: a busy channel over 10 minutes with a 3-minute idle hole and
 * its last period run at another drop rate than it set; an idle thinning channel last measured 4
 * minutes ago; a channel sharded in two. Each point is one 5 s fast-loop period.
 */
function madeUpChannels(now) {
  const point = (at, o) => ({
    at,
    by: "fast loop",
    elapsed_ms: 5000,
    delivered: o.delivered * 5,
    dropped: o.dropped * 5,
    occupancy: o.occupancy,
    allowed_rate: 20,
    drop_rate: o.rate,
    offered_rate: o.delivered + o.dropped,
    delivered_rate: o.delivered,
    dropped_rate: o.dropped,
  });
  const busy = [];
  for (let at = now - 600_000; at <= now - 5_000; at += 5_000) {
    if (at > now - 400_000 && at < now - 220_000) continue; // idle: no period measured
    busy.push(point(at, { delivered: 20, dropped: 40, occupancy: 7, rate: 0.667 }));
  }
  // The last period (3 s) ran at the drop rate 0 the one before it set, and set 0.667 at its end.
  busy[busy.length - 1].drop_rate = 0;
  busy.push({ ...point(now - 2_000, { delivered: 60, dropped: 0, occupancy: 7, rate: 0.667 }), elapsed_ms: 3000 });
  const idle = [0, 1, 2].map((i) =>
    point(now - 260_000 + i * 5_000, { delivered: 12, dropped: 0, occupancy: 3, rate: 0 }),
  );
  const shard = (name, occupancy, delivered) => {
    const s = [point(now - 3_000, { delivered, dropped: 1, occupancy, rate: 0.1 })];
    return { channel: `public:glance.sharded`, shard: name, occupancy, drop_rate: 0.1, series: s, snapshot: s[0] };
  };
  const entry = (channel, series, extra = {}) => ({
    channel,
    last_seen_at: series.at(-1)?.at ?? now,
    drop_rate: series.at(-1)?.drop_rate ?? 0,
    drop_mode: "random",
    target: "20/s",
    target_rate: 20,
    occupancy: series.at(-1)?.occupancy ?? null,
    last_sample: null,
    last_summary: null,
    series,
    snapshot: series.at(-1) ?? null,
    ...extra,
  });
  return [
    entry("public:glance.busy", busy),
    entry("public:glance.idle", idle, { drop_mode: "thinning" }),
    entry("public:glance.sharded", [], {
      occupancy: 7,
      sharding: { pattern: "public:glance.*", by: "group" },
      shards: [shard("es", 3, 4), shard("fr", 4, 5)],
    }),
  ];
}

/**
 * The made-up run on the page (at `width`): lines break at the idle hole (no series colour on the
 * canvas between its two sides, the delivered line left of it); the idle channel's figures are dimmed
 * and aged in minutes and the top line leaves it out and names its window; a sharded card sums its
 * shards; the drop rate says what the period ran at; the subscribers chart counts in whole numbers
 * from 0 under a title that fits; the 10-minute time axes read well; the badges say what their mode
 * means. Ends with a screenshot.
 */
export async function checkMadeUpRun(page, width) {
  await page.setViewportSize({ width, height: 900 });
  const real = await nextOverview(page);
  const body = { ...real, channels: madeUpChannels(real.now) };
  const madeUp = (route) => route.fulfill({ json: body });
  await page.route(OVERVIEW, madeUp);
  const busy = 'article[data-channel="public:glance.busy"]';
  const idle = 'article[data-channel="public:glance.idle"]';
  const sharded = 'article[data-channel="public:glance.sharded"]';
  try {
    await page.waitForSelector(`${sharded} .facts`, { timeout: 10_000 });
    await page.waitForFunction((sel) => document.querySelector(`${sel} .chart`)?.dataset.gaps?.startsWith("[["), busy, {
      timeout: 10_000,
    });
    // The plot between the hole's two sides: nothing opaque (grid lines are faint; the axis labels
    // below the plot are left out), while left of it the series are drawn.
    const pixels = await page.$eval(`${busy} .chart`, (chart) => {
      const [[x0, x1]] = JSON.parse(chart.dataset.gaps);
      const [top, bottom] = JSON.parse(chart.dataset.plotRows);
      const ctx = chart.querySelector("canvas").getContext("2d");
      const opaque = (from, to) => {
        const img = ctx.getImageData(from, top, Math.max(1, to - from), bottom - top).data;
        let n = 0;
        for (let i = 3; i < img.length; i += 4) if (img[i] > 128) n++;
        return n;
      };
      return { inside: opaque(x0 + 6, x1 - 6), before: opaque(Math.max(0, x0 - 40), x0 - 6), x0, x1 };
    });
    check(
      pixels.inside === 0 && pixels.before > 0,
      `at ${width} px lines break where no period was measured: nothing drawn between x ${pixels.x0} and ${pixels.x1} (${pixels.before} drawn pixels just before)`,
    );
    const shown = await page.evaluate(
      ([b, i, s]) => {
        const facts = (sel) =>
          Object.fromEntries(
            [...document.querySelectorAll(`${sel} .facts > div`)].map((d) => [
              d.querySelector("dt").textContent,
              `${d.querySelector("dd:not(.age)").textContent} (${d.querySelector(".age").textContent})`,
            ]),
          );
        const fits = (el) => el && el.scrollWidth <= el.clientWidth + 1 && el.getClientRects().length === 1;
        return {
          busy: facts(b),
          idle: facts(i),
          idleStale: document.querySelector(`${i} .facts`).classList.contains("stale"),
          sharded: facts(s),
          top: document.querySelector("#limits .latest")?.textContent ?? "",
          yticks: document.querySelector(`${b} .occupancy-chart`).dataset.yticks ?? "",
          titleFits: fits(document.querySelector(`${b} .occupancy-title`)),
          badges: [b, i].map((sel) => ({
            text: document.querySelector(`${sel} .badges span`).textContent,
            title: document.querySelector(`${sel} .badges span`).title,
          })),
        };
      },
      [busy, idle, sharded],
    );
    check(
      shown.idleStale && /min ago/.test(shown.idle["Delivered/s"]) && !/min ago/.test(shown.busy["Delivered/s"]),
      `an idle channel's figures are dimmed and aged (${shown.idle["Delivered/s"]}); a busy one's are seconds old (${shown.busy["Delivered/s"]})`,
    );
    check(
      /^Latest periods \(3 of 4 sampled channels, ended within \d+ s\): delivered 69\.0\/s$/.test(shown.top),
      `the top line sums recent periods only (the idle channel's 12/s left out) and says its window: "${shown.top}"`,
    );
    check(
      shown.sharded.Subscribers?.startsWith("7 ") && shown.sharded["Delivered/s"]?.startsWith("9.0 "),
      `a sharded card adds up its shards: subscribers ${shown.sharded.Subscribers}, delivered ${shown.sharded["Delivered/s"]}`,
    );
    check(
      /^0\.667 \(set 2 s ago, was 0\.00\)$/.test(shown.busy["Drop rate"]),
      `a drop rate set at a period's end says what the period ran at: ${shown.busy["Drop rate"]}`,
    );
    const ticks = shown.yticks.split(" ").map((t) => Number(t.replace(/,/g, "")));
    check(
      ticks.length >= 2 && ticks[0] === 0 && ticks.every(Number.isInteger) && ticks.at(-1) >= 7 && shown.titleFits,
      `the subscribers chart counts whole subscribers from 0 past the highest (ticks ${shown.yticks}) under a title that fits`,
    );
    for (const sel of [`${busy} .chart`, `${busy} .occupancy-chart`]) {
      const axis = await axisReadsWell(page, sel);
      check(axis.ok, `at ${width} px a 10-minute time axis reads well: ${axis.detail}`);
    }
    const [random, thinning] = shown.badges;
    check(
      random.text === "random drop" &&
        /random draw/.test(random.title) &&
        /THROTTLE_THINNING/.test(random.title) &&
        thinning.text === "thinning" &&
        /THROTTLE_THINNING/.test(thinning.title),
      `the drop mode's badge says what it means ("${random.text}": ${random.title.slice(0, 60)}…)`,
    );
    await page.screenshot({ path: join(artifacts, `dashboard-glance-${width}.png`), fullPage: true });
  } finally {
    await page.unroute(OVERVIEW, madeUp);
  }
}
