// @ts-check
// The dashboard's types, gathered here so every module imports them from one place
// (`/** @import { Channel } from "./types.js" */`). Only the typechecker reads this file: the page
// never loads it.

// ---- what the server sends: GET /v1/admin/overview and POST /v1/admin/sample (docs/api.md, Operator routes) ----
// Shapes the server defines in TypeScript are imported from there (the wire's frames, the settings'
// target), so each is written once.

/**
 * @typedef {import("../src/settings/targets").TargetJson | null} TargetJson
 * @typedef {{ sampled_at: number, offered_rate: number | null, allowed_rate: number | null,
 *   delivered: number, dropped: number, elapsed_ms: number, new_rate: number, written: boolean }} Sample
 * @typedef {{ at: number, by: "fast loop" | "sweep", elapsed_ms: number, delivered: number, dropped: number,
 *   occupancy: number, allowed_rate: number | null, drop_rate: number, offered_rate: number,
 *   delivered_rate: number, dropped_rate: number }} Point one period as a loop decided it (docs/api.md)
 * @typedef {{ channel: string, last_seen_at: number, drop_rate: number, drop_mode: string,
 *   target: TargetJson, target_rate: number | null, occupancy: number | null, last_sample: Sample | null,
 *   last_summary?: DropSummary | null, series?: Point[], snapshot?: Point | null,
 *   lever?: Lever, shard?: string, sharding?: { pattern: string, by: string } | null, shards?: Channel[] }} Channel
 * @typedef {Omit<import("../src/wire/frames").SummaryFrame, "type" | "channel" | "shard">} DropSummary the
 *   channel's last summary of drops, as its subscribers got it (src/wire/frames.ts)
 * @typedef {{ points_to: "throttle" | "shard" | "none", message_rate: number | null, occupancy: number | null,
 *   rule: string }} Lever
 * @typedef {{ channel: string, copies: number, failures: number }} RecordTotals
 * @typedef {{ skipped: number, thinned_max_rate: number, thinned_slow: number }} ReaderTotals subscribers thinned
 *   (their max_rate, or for slowness) and messages skipped for them, in all (docs/api.md, "Each reader's rate")
 * @typedef {{ now: number, channels: Channel[], messages: { delivered: number, dropped: number },
 *   rate_limits: Record<string, { allowed: number, denied: number }>, record?: RecordTotals,
 *   pusher?: PusherTotals, readers?: ReaderTotals }} Overview
 * @typedef {{ enabled: boolean, connections: number, subscriptions: number, errors: number }} PusherTotals the
 *   Pusher door's connections and subscriptions open now, and the Pusher errors it sent (docs/api.md, "The Pusher door")
 * @typedef {{ channels: { written?: boolean, deleted?: boolean }[] }} SamplerReport
 */

// ---- the page's own ----

/**
 * @typedef {(number | null)[]} Series
 * @typedef {[number[], Series, Series, Series, Series, Series]} ChartData x (seconds), offered, delivered,
 *   dropped, target, drop rate; a row of nulls where no period was measured
 * @typedef {{ el: HTMLElement, data: ChartData, plot: uPlot | null, observer: ResizeObserver | null,
 *   now: number }} ChannelView `now`: the server's clock at the last poll (seconds), where the time axis ends
 * @typedef {{ data: [number[], (number | null)[]], plot: uPlot | null, observer: ResizeObserver | null,
 *   now: number }} OccupancyView
 * @typedef {{ refresh: () => Promise<void>, fail: (e: unknown) => void }} CardActions what a card does after
 *   its buttons' calls: poll at once (`refresh`), or hand a 401 to the page (`fail` logs out)
 */

export {};
