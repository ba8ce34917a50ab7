/**
 * Ops routes (docs/api.md, Operator routes): health, Prometheus metrics and a channel's stats.
 * Metrics and stats need the admin bearer; health does not. The public manifest is ./manifest.ts; the
 * admin API that changes things is ./admin.ts.
 */
import { Hono } from "hono";
import * as z from "zod";
import type { ChannelStats } from "../../channel/calls";
import { renderPrometheus, seriesKey } from "../../metrics/series";
import { released } from "../../platform/rpc-result";
import { channelStub, metricsStub } from "../../platform/stubs";
import { formatDuration } from "../../settings/durations";
import { weakSecrets } from "../../settings/secrets";
import type { Settings } from "../../settings/settings";
import { ApiError } from "../../wire/errors";
import type { AppEnv } from "../app-env";
import { adminAuth } from "../auth/authorise";
import { orUnavailable } from "../http/errors";
import { ADMIN_ONLY, ChannelPath, documented, errors, json, route } from "../http/openapi";
import { channelParam } from "../http/params";
import type { Services } from "../services";
import { ShardStatsSchema, shardRuleView, shardsStats, totalled } from "../shards/shard-view";
import { ChannelViewSchema, channelView, targetOf } from "./channel-view";

export const ops = new Hono<AppEnv>();

const healthRoute = route({
  method: "get",
  path: "/healthz",
  summary: "Health check",
  description: "500 naming the variable when the configuration is invalid or a secret is weak.",
  responses: { 200: json(z.object({ ok: z.literal(true) }), "Healthy."), ...errors(500) },
});

ops.get(documented(ops, healthRoute), (c) => {
  // A weak secret is bad configuration: fail the health check so a deploy catches it.
  const weak = weakSecrets(c.env)[0];
  if (weak) throw new ApiError("internal", `server is not configured: ${weak.problem}`, { variable: weak.name });
  return c.json({ ok: true });
});

const metricsRoute = route({
  method: "get",
  path: "/metrics",
  summary: "Prometheus metrics",
  security: ADMIN_ONLY,
  responses: {
    200: {
      description: "Prometheus text format (docs/api.md, Operator routes, lists the series).",
      content: { "text/plain": { schema: z.string() } },
    },
    ...errors(401, 429, 500, 503),
  },
});

ops.get(documented(ops, metricsRoute), adminAuth, async (c) => {
  const svc = c.var.svc;
  await svc.metrics.flushNow();
  const [series, expired] = await Promise.all([
    orUnavailable("metrics", () => metricsSeries(c.env)),
    expiredCopies(c.env, svc.config),
  ]);
  if (expired !== null) series.floodgate_analytics_expired_total = expired;
  return c.body(renderPrometheus(series), 200, { "content-type": "text/plain; version=0.0.4; charset=utf-8" });
});

export function metricsSeries(env: Env): Promise<Record<string, number>> {
  return metricsStub(env).read();
}

/**
 * Copies the analytics channel's retention deleted, counted by its object (where they are deleted),
 * read at scrape time. A scrape is not traffic, so it is left out of `floodgate_object_calls_total`.
 * Null when the object cannot answer: the series is left out of that scrape rather than failing it.
 */
async function expiredCopies(env: Env, config: Settings): Promise<number | null> {
  const stub = channelStub(env, config.analyticsChannel.name);
  try {
    // Disposed once read (src/platform/rpc-result.ts).
    return released(await stub.recordCounts()).copies_expired_total;
  } catch (e) {
    console.error("floodgate: analytics channel unavailable for /metrics", e instanceof Error ? e.message : e);
    return null;
  }
}

const AnalyticsRecord = z
  .object({
    retention: z.string().openapi({ description: "RECORD_RETENTION." }),
    copies_total: z.number().int().openapi({ description: "Copies written to the record (RECORD_BUCKET)." }),
    copy_failures_total: z.number().int().openapi({ description: "Copies the record failed to take." }),
    copies_expired_total: z.number().int().openapi({ description: "Copies deleted by RECORD_RETENTION." }),
    dropped_total: z.number().int(),
    analytics_retention: z.string().openapi({ description: "ANALYTICS_RETENTION: how long the channel pages copies." }),
    copies_kept: z.number().int().openapi({ description: "Copies the analytics channel keeps for paging." }),
    oldest_dropped_at: z.number().int().nullable().openapi({ description: "Oldest copy the channel keeps." }),
  })
  .openapi("AnalyticsRecord");

const ChannelStatsSchema = ChannelViewSchema.extend({
  websockets: z.number().int(),
  sse: z.number().int(),
  relays: z
    .number()
    .int()
    .openapi({ description: "Relays serving the channel; occupancy, websockets and sse count them all." }),
  relay_sends_total: z
    .number()
    .int()
    .openapi({ description: "Channel-to-relay delivery calls made (each carries a batch of messages)." }),
  last_seq: z.number().int(),
  priority_total: z.number().int().openapi({
    description: "Priority messages delivered (Floodgate-Priority: high), counted in delivered_total too.",
  }),
  last_summary: z
    .looseObject({})
    .nullable()
    .openapi({ description: "The last summary frame of drops the channel sent, or null." }),
  analytics_copy_failures_total: z.number().int(),
  slow_consumers_closed: z.number().int(),
  record: AnalyticsRecord.optional().openapi({ description: "On the analytics channel only." }),
  presence: z
    .object({
      mode: z.enum(["announce", "interval"]),
      sends_total: z.number().int().openapi({
        description:
          "Relay lines given presence frames, plus relays woken for presence, since the channel's object started.",
      }),
    })
    .openapi({ description: "Presence (occupancy is `occupancy`): its mode and what it cost the channel." }),
  readers: z
    .object({
      thinned: z.number().int().openapi({
        description:
          "Subscribers thinned now: those with a max_rate, and those their relay thins for reading too slowly.",
      }),
      skipped_total: z.number().int().openapi({
        description: "Messages skipped for single subscribers (their max_rate or slowness), every subscriber's summed.",
      }),
    })
    .openapi({
      description: "Each reader's rate: what relays thin for single subscribers, at no cost to the channel.",
    }),
  shard_rule: z
    .object({ pattern: z.string(), by: z.enum(["group", "continent"]) })
    .optional()
    .openapi({ description: "Sharded channels only: the AUDIENCE_SHARDS rule that shards it." }),
  shards: z
    .record(z.string(), ShardStatsSchema)
    .optional()
    .openapi({
      description:
        "Sharded channels only, by shard name: each shard's own counts and drop rate. The channel's occupancy, " +
        "websockets, sse, relays and totals then add up every shard (and the channel's own object).",
    }),
}).openapi("ChannelStats");

const statsRoute = route({
  method: "get",
  path: "/v1/channels/{channel}/stats",
  summary: "A channel's stats",
  security: ADMIN_ONLY,
  request: { params: ChannelPath },
  responses: {
    200: json(ChannelStatsSchema, "The channel's view and its object's counts."),
    ...errors(400, 401, 429, 500, 503),
  },
});

ops.get(documented(ops, statsRoute), adminAuth, async (c) => {
  const svc = c.var.svc;
  const channel = channelParam(c.req.param("channel"));
  const { view, stats, analytics } = await channelView(c.env, svc, channel, targetOf(c.env, svc.config, channel));
  // The object's own counts go between the view's totals and its rates, as this route has always
  // answered them (the README's walk-through shows that order).
  const { channel: name, ...rest } = view;
  let { occupancy, delivered_total, dropped_total, ...rates } = rest;
  const rule = shardRuleView(svc.config, channel);
  let sharded: Record<string, unknown> = {};
  let counts = stats;
  let readers = stats.readers;
  if (rule) {
    // A sharded channel: its totals add every shard's own counts (docs/api.md, "Shards").
    const { shards, raw } = await shardsStats(c.env, svc, channel);
    const keys = [
      "occupancy",
      "websockets",
      "sse",
      "relays",
      "relay_sends_total",
      "delivered_total",
      "dropped_total",
      "priority_total",
      "analytics_copy_failures_total",
      "slow_consumers_closed",
    ] as const;
    counts = { ...stats, ...totalled(stats, raw, keys) };
    readers = readersOf([stats, ...raw]);
    ({ occupancy, delivered_total, dropped_total } = counts);
    sharded = { shard_rule: rule, shards };
  }
  return c.json({
    channel: name,
    occupancy,
    websockets: counts.websockets,
    sse: counts.sse,
    relays: counts.relays,
    relay_sends_total: counts.relay_sends_total,
    last_seq: stats.last_seq,
    delivered_total,
    dropped_total,
    priority_total: counts.priority_total,
    analytics_copy_failures_total: counts.analytics_copy_failures_total,
    slow_consumers_closed: counts.slow_consumers_closed,
    ...rates,
    last_summary: stats.last_summary,
    ...(analytics ? { record: await recordView(c.env, svc, stats) } : {}),
    presence: stats.presence,
    readers,
    ...sharded,
  });
});

/** Each reader's rate (docs/api.md, "Each reader's rate"): a sharded channel's `readers` add every shard's. */
function readersOf(all: ChannelStats[]): ChannelStats["readers"] {
  let thinned = 0;
  let skipped = 0;
  for (const s of all) {
    thinned += s.readers?.thinned ?? 0;
    skipped += s.readers?.skipped_total ?? 0;
  }
  return { thinned, skipped_total: skipped };
}

/**
 * The record's reconciliation: copies recorded, failed and expired (the metrics the queue's consumer
 * and the retention sweep count), beside the deployment's dropped messages, so that
 * `dropped_total = copies_total + copy_failures_total` can be checked by anyone once copies in
 * flight have landed; and what the analytics channel (the live view) keeps for paging.
 */
async function recordView(env: Env, svc: Services, stats: ChannelStats) {
  await svc.metrics.flushNow();
  const series = await orUnavailable("metrics", () => metricsSeries(env));
  const counts = stats.record ?? { copies_total: 0, copies_kept: 0, copies_expired_total: 0, oldest_dropped_at: null };
  return {
    retention: formatDuration(svc.config.recordRetentionMs),
    copies_total: series.floodgate_record_copies_total ?? 0,
    copy_failures_total: series.floodgate_record_failures_total ?? 0,
    copies_expired_total: series.floodgate_record_expired_total ?? 0,
    dropped_total: series[seriesKey("floodgate_messages_total", { result: "dropped" })] ?? 0,
    analytics_retention: formatDuration(svc.config.analyticsRetentionMs),
    copies_kept: counts.copies_kept,
    oldest_dropped_at: counts.oldest_dropped_at,
  };
}
