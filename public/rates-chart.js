// @ts-check
// A card's main chart (uPlot, loaded as a global from /vendor): offered, delivered and dropped
// messages per second against the target, one point per period a loop decided, and the drop rate each
// decision set (its own axis on the right, 0 to 1, held until the next decision). Lines break where no
// period was measured, and the time axis ends at the server's `now`.

import { $ } from "./dom.js";
import { withGaps } from "./periods.js";
import { timeAxis, timeRange, timeValue, Y_AXIS } from "./time-axis.js";

/** @import { ChannelView, Point } from "./types.js" */

const HEIGHT = 200;

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
        height: HEIGHT,
        scales: {
          x: { time: true, range: (u) => timeRange(u.data[0], view.now) },
          // From 0: how far delivered sits below offered reads true at a glance.
          y: { range: (_u, _min, max) => [0, Math.max(1, (max ?? 0) * 1.1)] },
          rate: { range: [0, 1] },
        },
        hooks: { setCursor: [showLatest], setScale: [recordSpan], draw: [recordGaps] },
        axes: [
          timeAxis(),
          { stroke: "#8b98a5", label: "msg/s", size: Y_AXIS.left, labelSize: Y_AXIS.label },
          {
            scale: "rate",
            side: 1,
            stroke: "#bc8cff",
            label: "drop rate",
            size: Y_AXIS.right,
            labelSize: Y_AXIS.label,
            incrs: [0.1, 0.25, 0.5],
            values: (_u, splits) => splits.map((v) => String(Math.round(v * 100) / 100)),
            grid: { show: false },
          },
        ],
        series: [
          { value: timeValue },
          { label: "offered", stroke: "#8b98a5", width: 1 },
          { label: "delivered", stroke: "#3fb950", width: 2 },
          { label: "dropped", stroke: "#ff7b72", width: 1 },
          { label: "target", stroke: "#d29922", dash: [6, 4], width: 1 },
          {
            label: "drop rate",
            scale: "rate",
            stroke: "#bc8cff",
            width: 1.5,
            // A decision holds until the next one: a step, not a slope between two decisions.
            paths: uPlot.paths.stepped?.({ align: 1 }),
            value: (_u, v) => (v == null ? "--" : v.toFixed(3)),
          },
        ],
      },
      view.data,
      chart,
    );
    view.plot = plot;
    view.observer = new ResizeObserver(() => plot.setSize({ width: chart.clientWidth, height: HEIGHT }));
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
 * mid-run (or reloaded) shows the run. The target line is what each period's target allowed; a row of
 * nulls marks each stretch no period measured. A channel without a target now draws no target line:
 * the card says "none", and so does the chart.
 * @param {ChannelView} view
 * @param {Point[]} series
 * @param {boolean} targeted whether the channel has a target now
 * @param {number} now the server's clock (epoch ms): where the time axis ends
 */
export function renderRatesChart(view, series, targeted, now) {
  const d = view.data;
  for (const line of d) line.length = 0;
  view.now = now / 1000;
  for (const { at, point: p } of withGaps(series)) {
    d[0].push(at / 1000);
    d[1].push(p ? p.offered_rate : null);
    d[2].push(p ? p.delivered_rate : null);
    d[3].push(p ? p.dropped_rate : null);
    d[4].push(p && targeted ? p.allowed_rate : null);
    d[5].push(p ? p.drop_rate : null);
  }
  const plot = view.plot;
  if (!plot) return;
  plot.setData(d);
  showLatest(plot);
  // How many points the chart holds, on its element (the browser test reads it; recordSpan adds the
  // time axis's span, recordGaps where the lines break, the time axis its labels).
  $(".chart", view.el).dataset.points = String(series.length);
}

/**
 * Records where the lines break, after every draw: for each row of nulls, the canvas pixels (x) of the
 * points either side of it, and the plot's rows (y, from its top to its bottom), so the browser test
 * can look at the canvas there.
 * @param {uPlot} u
 */
function recordGaps(u) {
  const xs = u.data[0];
  const ys = u.data[2] ?? [];
  /** @type {[number, number][]} */
  const gaps = [];
  for (let i = 1; i < xs.length - 1; i++) {
    const before = xs[i - 1];
    const after = xs[i + 1];
    if (ys[i] === null && before !== undefined && after !== undefined)
      gaps.push([Math.round(u.valToPos(before, "x", true)), Math.round(u.valToPos(after, "x", true))]);
  }
  const chart = u.root.parentElement;
  if (!chart) return;
  chart.dataset.gaps = JSON.stringify(gaps);
  chart.dataset.plotRows = JSON.stringify([Math.round(u.bbox.top), Math.round(u.bbox.top + u.bbox.height)]);
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
