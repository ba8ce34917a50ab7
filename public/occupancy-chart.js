// @ts-check
// Occupancy over time (docs/api.md, "Presence"): each card keeps the channel's occupancy at every
// poll where it moved (or after a minute unchanged), in its own small chart below the rates.

import { $ } from "./dom.js";

/** @import { Channel, OccupancyView } from "./types.js" */

/** Occupancy points a page keeps for a channel the sampler does not measure (one per minute at most). */
const OCCUPANCY_POINTS = 150;

/** @type {Map<string, OccupancyView>} */
const occupancyViews = new Map();

/**
 * @param {Channel} c
 * @param {HTMLElement} card
 */
export function renderOccupancy(c, card) {
  let view = occupancyViews.get(c.channel);
  if (!view) {
    const chart = document.createElement("div");
    chart.className = "occupancy-chart";
    chart.setAttribute("aria-label", "Subscribers over time");
    $(".chart", card).after(chart);
    /** @type {OccupancyView} */
    const made = { data: [[], []], plot: null, observer: null };
    if (typeof uPlot === "function") {
      const plot = new uPlot(
        {
          width: chart.clientWidth || 320,
          height: 100,
          scales: { x: { time: true } },
          axes: [{ stroke: "#8b98a5" }, { stroke: "#8b98a5", label: "subscribers" }],
          series: [{}, { label: "occupancy", stroke: "#58a6ff", width: 2 }],
          // One series, named by its axis: a legend would only repeat the card's subscriber count.
          legend: { show: false },
        },
        made.data,
        chart,
      );
      made.plot = plot;
      made.observer = new ResizeObserver(() => plot.setSize({ width: chart.clientWidth, height: 100 }));
      made.observer.observe(chart);
    }
    view = made;
    occupancyViews.set(c.channel, view);
  }
  const [times, values] = view.data;
  const series = c.series ?? [];
  if (series.length > 0) {
    // A sampled channel: its occupancy as the server's series has it, so a page opened mid-run shows
    // the run (each point's subscribers as its loop counted them).
    view.data = [series.map((p) => p.at / 1000), series.map((p) => p.occupancy)];
    view.plot?.setData(view.data);
    return;
  }
  // Not sampled: no series on the server, so the page keeps what it saw.
  const now = Date.now() / 1000;
  const last = values.at(-1);
  const lastAt = times.at(-1) ?? 0;
  if (last === c.occupancy && now - lastAt < 60) return;
  times.push(now);
  values.push(c.occupancy);
  if (times.length > OCCUPANCY_POINTS) {
    times.shift();
    values.shift();
  }
  view.plot?.setData(view.data);
}

/** @param {string} name */
export function forgetOccupancy(name) {
  const view = occupancyViews.get(name);
  view?.observer?.disconnect();
  view?.plot?.destroy();
  occupancyViews.delete(name);
}
