// @ts-check
// A channel's measured periods (the overview's `series`, docs/api.md) as the page reads them: where
// no period was measured (the charts break their lines there), which periods are recent enough to
// count as "now", how old a figure is, and a card's one period (a sharded channel's: its shards' summed).

/** @import { Channel, Point } from "./types.js" */

/**
 * Periods of a series follow each other without a hole (each starts where a loop's previous one
 * ended); one starting later than this (ms) after everything before it had ended leaves a gap.
 */
const GAP_SLACK_MS = 1000;
/** The sampler's period when the series do not show two runs yet: the Cron Trigger's minute. */
const DEFAULT_SWEEP_MS = 60_000;
/** Sampler runs whose spacing the page looks at (the median of them, so one manual run does not count). */
const SWEEPS_LOOKED_AT = 6;

/**
 * The chart's rows: each point at its end (`at`), and a null row wherever no period was measured
 * between two points (the channel was idle: neither loop ran), so a chart breaks its line there
 * instead of drawing it straight across. Fast-loop and sweep periods overlap; only time neither covers
 * is a gap.
 * @param {Point[]} series oldest first
 * @returns {{ at: number, point: Point | null }[]}
 */
export function withGaps(series) {
  /** @type {{ at: number, point: Point | null }[]} */
  const rows = [];
  let coveredTo = Number.NEGATIVE_INFINITY;
  for (const p of series) {
    const start = p.at - p.elapsed_ms;
    if (rows.length > 0 && start - coveredTo > GAP_SLACK_MS) rows.push({ at: (coveredTo + start) / 2, point: null });
    rows.push({ at: p.at, point: p });
    coveredTo = Math.max(coveredTo, p.at);
  }
  return rows;
}

/**
 * How often the sampler runs, as the series show it: every channel a run visits gets a sweep point
 * stamped with the run's start, so the spacing of those stamps is the sampler's period (a minute with
 * the Cron Trigger, `SAMPLER_LOCAL_PERIOD` under `npm start`). The median of the last few runs' spacing.
 * @param {Channel[]} channels
 */
export function sweepEveryMs(channels) {
  const runs = new Set();
  for (const c of everySampled(channels)) for (const p of c.series ?? []) if (p.by === "sweep") runs.add(p.at);
  const at = [...runs].sort((a, b) => a - b).slice(-(SWEEPS_LOOKED_AT + 1));
  const gaps = at
    .slice(1)
    .map((t, i) => t - (at[i] ?? t))
    .sort((a, b) => a - b);
  return gaps.length ? (gaps[Math.floor(gaps.length / 2)] ?? DEFAULT_SWEEP_MS) : DEFAULT_SWEEP_MS;
}

/**
 * The newest period of a busy channel is at most one sampler period old: the fast loop's points reach
 * the server with the sampler's next visit, and a channel with traffic is visited every run. A channel
 * whose newest period is older than this had no traffic since: its figures are not "now".
 * @param {Channel[]} channels
 */
export function recentWindowMs(channels) {
  return Math.max(5000, Math.round(sweepEveryMs(channels) * 1.5));
}

/**
 * Every channel that has periods of its own: the listed ones, a sharded channel's shards in its place.
 * @param {Channel[]} channels
 */
export function everySampled(channels) {
  return channels.flatMap((c) => (c.shards?.length ? c.shards : [c]));
}

/**
 * A card's one period: the channel's newest point; for a sharded channel its shards' newest points
 * summed (rates and subscribers), the highest drop rate, and the oldest `at` of them (so its age is
 * never younger than any figure in it). Null before the first.
 * @param {Channel} c
 * @returns {Point | null}
 */
export function cardPeriod(c) {
  if (!c.shards?.length) return c.snapshot ?? null;
  const points = /** @type {Point[]} */ (c.shards.map((s) => s.snapshot).filter((p) => p));
  const first = points[0];
  if (!first) return null;
  const sum = (/** @type {(p: Point) => number} */ f) => Math.round(points.reduce((n, p) => n + f(p), 0) * 100) / 100;
  const oldest = points.reduce((a, p) => (p.at < a.at ? p : a), first);
  return {
    ...oldest,
    delivered: sum((p) => p.delivered),
    dropped: sum((p) => p.dropped),
    occupancy: sum((p) => p.occupancy),
    drop_rate: Math.max(...points.map((p) => p.drop_rate)),
    offered_rate: sum((p) => p.offered_rate),
    delivered_rate: sum((p) => p.delivered_rate),
    dropped_rate: sum((p) => p.dropped_rate),
  };
}

/**
 * The decision in force when period `p` began: the newest other point at or before its start (its
 * drop rate ran during `p`, its subscriber count is the one `p` began with: counts are read as a period
 * ends), or null when the series does not reach back that far or a gap lies between.
 * @param {Point[]} series oldest first
 * @param {Point} p
 * @returns {Point | null}
 */
export function pointBefore(series, p) {
  const start = p.at - p.elapsed_ms;
  for (let i = series.length - 1; i >= 0; i--) {
    const q = series[i];
    if (q && q !== p && q.at <= start + GAP_SLACK_MS) return start - q.at > GAP_SLACK_MS ? null : q;
  }
  return null;
}

/**
 * How long ago `at` was, from the server's `now` (both epoch ms, one clock): "now", "9 s ago", "4 min ago".
 * @param {number} now
 * @param {number} at
 */
export function ageText(now, at) {
  const s = Math.max(0, Math.round((now - at) / 1000));
  if (s < 1) return "now";
  if (s < 120) return `${s} s ago`;
  if (s < 7200) return `${Math.round(s / 60)} min ago`;
  return `${Math.round(s / 3600)} h ago`;
}
