// @ts-check
// Occupancy over time (docs/api.md, "Presence"): the subscribers each loop counted at the end of its
// period, in a small chart of their own below the rates, titled above it (a rotated axis label does not
// fit its height), on a whole-number scale from 0. A channel the sampler does not measure has no
// series: the page keeps the count at every poll where it moved (or after a minute unchanged).

import { $ } from "./dom.js";
import { withGaps } from "./periods.js";
import { timeAxis, timeRange, timeValue, Y_AXIS } from "./time-axis.js";

/** @import { Channel, OccupancyView } from "./types.js" */

/** Occupancy points a page keeps for a channel the sampler does not measure (one per minute at most). */
const OCCUPANCY_POINTS = 150;
const HEIGHT = 130;
/** Tick steps: whole subscribers only. */
const STEPS = [1, 2, 5, 10, 20, 50, 100, 200, 500, 1000, 2000, 5000, 10_000, 20_000, 50_000, 100_000, 200_000];

/**
 * The count axis: from 0 to a top a little above the highest count, in at most four whole steps, the
 * top itself a tick, so every count is read against labelled ticks on both sides.
 * @param {number} highest
 * @returns {{ top: number, step: number }}
 */
function countScale(highest) {
  const step = STEPS.find((s) => highest / s <= 2.5) ?? 10 ** Math.ceil(Math.log10(Math.max(1, highest / 2.5)));
  return { top: Math.max(step, Math.ceil((highest * 1.1) / step) * step), step };
}

/** @type {Map<string, OccupancyView>} */
const occupancyViews = new Map();

/**
 * @param {Channel} c
 * @param {HTMLElement} card
 * @param {number} now the server's clock (epoch ms)
 */
export function renderOccupancy(c, card, now) {
  let view = occupancyViews.get(c.channel);
  if (!view) {
    view = mount(card);
    occupancyViews.set(c.channel, view);
  }
  view.now = now / 1000;
  const series = c.series ?? [];
  if (series.length > 0) {
    // A sampled channel: its occupancy as the server's series has it, so a page opened mid-run shows
    // the run (each point's subscribers as its loop counted them), broken where nothing was measured.
    const rows = withGaps(series);
    view.data = [rows.map((r) => r.at / 1000), rows.map((r) => r.point?.occupancy ?? null)];
    view.plot?.setData(view.data);
    return;
  }
  // Not sampled: no series on the server, so the page keeps what it saw.
  const [times, values] = view.data;
  const at = now / 1000;
  const last = values.at(-1);
  const lastAt = times.at(-1) ?? 0;
  if (last === c.occupancy && at - lastAt < 60) return;
  times.push(at);
  values.push(c.occupancy);
  if (times.length > OCCUPANCY_POINTS) {
    times.shift();
    values.shift();
  }
  view.plot?.setData(view.data);
}

/**
 * The title and the chart, after the card's rates chart.
 * @param {HTMLElement} card
 * @returns {OccupancyView}
 */
function mount(card) {
  const title = document.createElement("p");
  title.className = "chart-title occupancy-title";
  title.textContent = "Subscribers (counted as each period ended)";
  const chart = document.createElement("div");
  chart.className = "occupancy-chart";
  chart.setAttribute("role", "img");
  chart.setAttribute("aria-label", "Subscribers over time");
  $(".chart", card).after(title, chart);
  /** @type {OccupancyView} */
  const view = { data: [[], []], plot: null, observer: null, now: Date.now() / 1000 };
  if (typeof uPlot !== "function") return view;
  /** The count axis's step, set with its range (countScale). */
  let step = 1;
  const plot = new uPlot(
    {
      width: chart.clientWidth || 320,
      height: HEIGHT,
      scales: {
        x: { time: true, range: (u) => timeRange(u.data[0], view.now) },
        // From 0, with room above the highest count: a flat line of 5 sits inside the chart, not on an edge.
        y: {
          range: (_u, _min, max) => {
            const scale = countScale(max ?? 0);
            step = scale.step;
            return [0, scale.top];
          },
        },
      },
      axes: [
        timeAxis(),
        {
          stroke: "#8b98a5",
          size: Y_AXIS.left + Y_AXIS.label,
          splits: (_u, _axis, _min, max) => Array.from({ length: Math.round(max / step) + 1 }, (_, i) => i * step),
          values: (_u, splits) => {
            const labels = splits.map((v) => v.toLocaleString("en"));
            chart.dataset.yticks = labels.join(" ");
            return labels;
          },
        },
        // Empty, as wide as the rates chart's drop-rate axis: the two plots line up in time.
        {
          side: 1,
          scale: "y",
          size: Y_AXIS.right + Y_AXIS.label,
          values: (_u, splits) => splits.map(() => ""),
          grid: { show: false },
          ticks: { show: false },
        },
      ],
      series: [{ value: timeValue }, { label: "subscribers", stroke: "#58a6ff", width: 2 }],
      // One series, named by the title above: a legend would only repeat the card's subscriber count.
      legend: { show: false },
    },
    view.data,
    chart,
  );
  view.plot = plot;
  view.observer = new ResizeObserver(() => plot.setSize({ width: chart.clientWidth, height: HEIGHT }));
  view.observer.observe(chart);
  return view;
}

/** @param {string} name */
export function forgetOccupancy(name) {
  const view = occupancyViews.get(name);
  view?.observer?.disconnect();
  view?.plot?.destroy();
  occupancyViews.delete(name);
}
