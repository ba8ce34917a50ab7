// @ts-check
// A card's main chart (uPlot, loaded as a global from /vendor): offered, delivered and dropped
// messages per second against the target, one point per period a loop decided.

import { $ } from "./dom.js";

/** @import { ChannelView, Point } from "./types.js" */

/** A chart with one point spans this much time around it (seconds), not uPlot's years. */
const SINGLE_POINT_SPAN_S = 30;

/**
 * Draws an empty chart in the card's `.chart` element, sized to it as it resizes; without uPlot the
 * element says how to get it.
 * @param {ChannelView} view
 */
export function mountRatesChart(view) {
  const chart = $(".chart", view.el);
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
}

/**
 * Removes the chart and stops watching its size.
 * @param {ChannelView} view
 */
export function unmountRatesChart(view) {
  view.observer?.disconnect();
  view.plot?.destroy();
}

/**
 * The chart, from the server's series: both loops' decisions since the run began, so a page opened
 * mid-run (or reloaded) shows the run. The target line is what each period's target allowed.
 * A channel without a target now draws no target line: the card says "none", and so does the chart.
 * @param {ChannelView} view
 * @param {Point[]} series
 * @param {boolean} targeted whether the channel has a target now
 */
export function renderRatesChart(view, series, targeted) {
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
