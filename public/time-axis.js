// @ts-check
// The charts' time axis: one line of labels in whole seconds or minutes, spaced so no two touch at any
// width, and a range that ends at the server's `now` (an idle stretch shows as empty space on the right).

/** Tick steps in seconds: never under a second (a period is seconds long), up to a day. */
const STEPS_S = [1, 2, 5, 10, 15, 30, 60, 120, 300, 600, 900, 1800, 3600, 7200, 10800, 21600, 43200, 86400];
/** The axis labels' font, set on the axis and used to measure them. */
const FONT = "12px system-ui, -apple-system, sans-serif";
/** Space left between two labels (px). */
const LABEL_GAP_PX = 16;
/**
 * The widths (px) of the charts' side axes: the rates chart's msg/s on the left and drop rate on the
 * right, each with its label; the subscribers chart takes the same room, so both plots line up.
 */
export const Y_AXIS = { left: 50, right: 44, label: 22 };

/** The axis never spans less than this (seconds): one point alone is not widened to uPlot's years. */
const MIN_SPAN_S = 30;

const seconds = new Intl.DateTimeFormat(undefined, { hour: "numeric", minute: "2-digit", second: "2-digit" });
const minutes = new Intl.DateTimeFormat(undefined, { hour: "numeric", minute: "2-digit" });
const days = new Intl.DateTimeFormat(undefined, { month: "short", day: "numeric" });

/**
 * A tick's label: seconds shown only when ticks are less than a minute apart, the date only when a day.
 * @param {number} t seconds since the epoch
 * @param {number} step seconds between ticks
 */
function tickLabel(t, step) {
  const d = new Date(t * 1000);
  if (step < 60) return seconds.format(d);
  if (step < 86400) return minutes.format(d);
  return days.format(d);
}

/** @type {Map<number, number>} The widest label this locale writes (px) with seconds (step 1) and without (60). */
const widest = new Map();

/**
 * The widest label of a form: with seconds (`step` under 60) or without, so the spacing fits every label.
 * @param {number} step
 */
function widestLabel(step) {
  const form = step < 60 ? 1 : 60;
  const known = widest.get(form);
  if (known !== undefined) return known;
  const ctx = document.createElement("canvas").getContext("2d");
  if (!ctx) return 80;
  ctx.font = FONT;
  // Hours 0, 10–12 and 22–23 give every locale's widest hour (12-hour clocks: "10:58:58 PM").
  const samples = [0, 10, 12, 22, 23].map((h) => tickLabel(new Date(2026, 0, 1, h, 58, 58).getTime() / 1000, form));
  const px = Math.ceil(Math.max(...samples.map((s) => ctx.measureText(s).width)));
  widest.set(form, px);
  return px;
}

/**
 * The least room between two ticks (px). Labels without seconds are narrower: when that narrower
 * spacing already makes ticks a minute or more apart, it is enough; otherwise ticks are seconds apart
 * and carry seconds, and need the wider room.
 * @param {uPlot} _u
 * @param {number} _axis
 * @param {number} min seconds
 * @param {number} max seconds
 * @param {number} plotPx
 */
function labelSpace(_u, _axis, min, max, plotPx) {
  const narrow = widestLabel(60) + LABEL_GAP_PX;
  const perSecond = plotPx / Math.max(1, max - min);
  const step = STEPS_S.find((s) => s * perSecond >= narrow) ?? 86400;
  return step >= 60 ? narrow : widestLabel(1) + LABEL_GAP_PX;
}

/**
 * The x series' value in the legend: the hovered (or newest) point's time, with seconds.
 * @param {uPlot} _u
 * @param {number | null} t seconds
 */
export function timeValue(_u, t) {
  return t == null ? "--" : seconds.format(new Date(t * 1000));
}

/**
 * The time axis for a chart. Its labels (and the pixels between two ticks) are recorded on the chart's
 * element after every draw, for the browser test: a canvas shows a script nothing.
 * @returns {uPlot.Axis}
 */
export function timeAxis() {
  return {
    stroke: "#8b98a5",
    font: FONT,
    space: labelSpace,
    incrs: STEPS_S,
    values: (u, splits, _axis, space, step) => {
      const labels = splits.map((t) => tickLabel(t, step));
      const chart = u.root.parentElement;
      if (chart) {
        chart.dataset.xticks = JSON.stringify(labels);
        chart.dataset.xstep = String(step);
        chart.dataset.xgap = String(Math.round(space));
        chart.dataset.xlabel = String(widestLabel(step));
      }
      return labels;
    },
  };
}

/**
 * The x range: from the first row (or {@link MIN_SPAN_S} before `now`, if later) to `now`, so every
 * chart ends at the present and the time since the last measured period is visible.
 * @param {ArrayLike<number>} xs seconds, ascending
 * @param {number} now seconds
 * @returns {uPlot.Range.MinMax}
 */
export function timeRange(xs, now) {
  const first = xs.length ? (xs[0] ?? now) : now;
  const last = xs.length ? (xs[xs.length - 1] ?? now) : now;
  const max = Math.max(now, last);
  return [Math.min(first, max - MIN_SPAN_S), max];
}
