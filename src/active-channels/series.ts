/**
 * A channel's recent throttle history for the dashboard (docs/api.md, `GET /v1/admin/overview`):
 * one point per fast-loop decision (every `SAMPLER_FAST_PERIOD`) and one per sweep, kept in the
 * sampler's registry (src/active-channels/active-channels.ts) so a page opened mid-run, or reloaded, shows the
 * run from its first period — not only the sweeps since the page was opened.
 *
 * The points travel without extra calls: the channel's object holds its fast-loop points until the
 * sweep's next visit takes them with the period's counts, and the sweep hands them to the registry
 * with its own. Every bound is fixed: {@link FAST_POINTS_HELD} in a channel's object between visits,
 * {@link SERIES_POINTS} per channel and {@link SERIES_CHANNELS} channels in the registry.
 */
import { allowedMessageRate, type SamplerTarget } from "../../functions/sampler";

/** Fast-loop points a channel's object holds between two sweep visits (the oldest go first). */
export const FAST_POINTS_HELD = 24;
/** Points the registry keeps per channel: 10 minutes of 5 s fast-loop periods and 10 s sweeps locally. */
export const SERIES_POINTS = 180;
/** Channels whose series the registry keeps: the most recently seen. */
export const SERIES_CHANNELS = 100;

/** One period as a loop decided it. */
export interface SeriesPoint {
  /** When the period ended and the decision was made (epoch ms). */
  at: number;
  by: "fast loop" | "sweep";
  elapsed_ms: number;
  delivered: number;
  dropped: number;
  occupancy: number;
  /** Messages per second the target allowed at that occupancy; null: no target. */
  allowed_rate: number | null;
  /** The drop rate decided at the end of the period. */
  drop_rate: number;
}

/** A point as the overview answers it: the counts and the per-second rates of the same period. */
export interface SeriesPointJson extends SeriesPoint {
  offered_rate: number;
  delivered_rate: number;
  dropped_rate: number;
}

const round2 = (n: number) => Math.round(n * 100) / 100;
/** A deliveries target with no subscribers allows any rate: JSON has no Infinity, so null. */
const finiteOrNull = (n: number) => (Number.isFinite(n) ? round2(n) : null);

/** A fast-loop period's point: its counts, the target's allowed rate, the rate it decided. */
export function fastLoopPoint(
  at: number,
  counts: { delivered: number; dropped: number; elapsedMs: number; occupancy: number },
  target: SamplerTarget,
  rate: number,
): SeriesPoint {
  return {
    at,
    by: "fast loop",
    elapsed_ms: counts.elapsedMs,
    delivered: counts.delivered,
    dropped: counts.dropped,
    occupancy: counts.occupancy,
    allowed_rate: finiteOrNull(allowedMessageRate(target, counts.occupancy)),
    drop_rate: rate,
  };
}

/** The per-second rates of a point's own period, so every number shown for it agrees. */
export function pointJson(p: SeriesPoint): SeriesPointJson {
  const secs = Math.max(0.001, p.elapsed_ms / 1000);
  return {
    ...p,
    offered_rate: round2((p.delivered + p.dropped) / secs),
    delivered_rate: round2(p.delivered / secs),
    dropped_rate: round2(p.dropped / secs),
  };
}
