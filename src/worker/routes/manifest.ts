/**
 * `GET /v1/manifest` (docs/api.md, Operator routes): the public manifest — budgets, throttle, messages,
 * sessions, record, summaries, presence, shards, CORS, the audience's bounds, metrics and the Pusher
 * door, as the configuration has them: every variable of src/settings/variables.ts, parsed (a test
 * holds it to that). Per-token overrides never appear, nor any secret.
 */
import { Hono } from "hono";
import * as z from "zod";
import { formatDuration } from "../../settings/durations";
import { limitToJson } from "../../settings/limits";
import type { Settings } from "../../settings/settings";
import { targetJson } from "../../settings/targets";
import type { Manifest as ManifestJson } from "../../wire/manifest";
import type { AppEnv } from "../app-env";
import { documented, errors, json, LimitSchema, route, TargetSchema } from "../http/openapi";

/** The public manifest (docs/api.md, Operator routes). Per-token overrides never appear. */
export function manifest(config: Settings): ManifestJson {
  const perChannel = (rules: Settings["perChannelPublish"]) =>
    rules.map((r) => ({ pattern: r.pattern.source, limit: limitToJson(r.value) }));
  const publish = perChannel(config.perChannelPublish);
  const subscribe = perChannel(config.perChannelSubscribe);
  return {
    rate_limits: {
      publish: limitToJson(config.publish),
      subscribe: limitToJson(config.subscribe),
      token_issue: limitToJson(config.tokenIssue),
      read: limitToJson(config.read),
      admin_auth: limitToJson(config.adminAuth),
      ...(publish.length ? { per_channel_publish: publish } : {}),
      ...(subscribe.length ? { per_channel_subscribe: subscribe } : {}),
    },
    throttle: {
      fallback_rate: config.throttleFallbackRate,
      target: targetJson(config.throttleTarget),
      ...(config.throttleTargets.length
        ? { targets: config.throttleTargets.map((r) => ({ pattern: r.pattern.source, target: targetJson(r.value) })) }
        : {}),
      ...(config.throttleThinning.length ? { thinning: config.throttleThinning.map((p) => p.source) } : {}),
      analytics_channel: config.analyticsChannel.name,
      rate_cache_ms: config.rateCacheMs,
      fast_period: formatDuration(config.samplerFastPeriodMs),
      sampler_max_channels: config.samplerMaxChannels,
    },
    // What a channel takes and keeps (docs/api.md, publish and history), and how long a relay holds a
    // packed frame back (docs/api.md, "Packed frames").
    messages: {
      max_bytes: config.maxMessageBytes,
      history_limit: config.historyLimit,
      history_ttl: formatDuration(config.historyTtlMs),
      frame_delay: formatDuration(config.frameDelayMs),
    },
    // How long a refresh chain lives after its first mint (docs/api.md, Tokens).
    tokens: { session_ttl: formatDuration(config.sessionTtlSeconds * 1000) },
    // The record of dropped messages: how long the bucket keeps a copy (and the longest export), and
    // how long the analytics channel pages them.
    record: {
      retention: formatDuration(config.recordRetentionMs),
      analytics_retention: formatDuration(config.analyticsRetentionMs),
    },
    // Summaries of drops (docs/api.md, "Summaries of drops"): the period, and the rules in selection order.
    summaries: {
      interval: formatDuration(config.summaryIntervalMs),
      ...(config.throttleSummary.length
        ? { rules: config.throttleSummary.map((r) => ({ pattern: r.pattern.source, pointer: r.value.pointer })) }
        : {}),
    },
    // CONFLATE_KEYS in selection order (docs/api.md, "Each reader's rate"): what a subscriber with a
    // max_rate holds the latest of per key.
    conflate_keys: config.conflateKeys.map((r) => ({ pattern: r.pattern.source, pointer: r.value.pointer })),
    // Presence (docs/api.md, "Presence"): announced per join and leave up to announce_max, above it
    // one interval frame per interval.
    presence: { announce_max: config.presenceAnnounceMax, interval: formatDuration(config.presenceIntervalMs) },
    // AUDIENCE_SHARDS in selection order (docs/api.md, "Shards"); empty when no rule is set.
    audience_shards: config.audienceShards.map((r) => ({ pattern: r.pattern.source, by: r.value.by })),
    // CORS_ORIGINS (docs/api.md, "Browsers on other origins"): the listed origins, and "*" when public
    // reads are open to any origin; empty: only the Worker's own origin, servers and native apps.
    cors_origins: [...config.cors.origins, ...(config.cors.anyForPublicReads ? ["*"] : [])],
    // Who may hold a channel's places (docs/api.md, "Relays"): its largest audience, one client's share
    // of it, anonymous subscribers' share, and one client's connections over all channels.
    audience: {
      max_subscribers: config.maxSubscribers,
      relay_capacity: config.relayCapacity,
      max_subscriptions_per_client: config.maxSubscriptionsPerClient,
      anonymous_share: config.anonymousShare,
      max_connections_per_client: config.maxConnectionsPerClient,
    },
    // How far /metrics may lag one isolate's counts (docs/operations.md, Metrics).
    metrics: { flush_ms: config.metricsFlushMs },
    // The Pusher door (docs/api.md, "The Pusher door"): never its secret.
    pusher: {
      enabled: config.pusher.app !== null,
      app_id: config.pusher.app?.id ?? null,
      key: config.pusher.app?.key ?? null,
      client_events_rate: limitToJson(config.pusher.clientEvents),
      activity_timeout: config.pusher.activityTimeoutS,
    },
  };
}

export const manifestRoutes = new Hono<AppEnv>();

const PerChannelLimits = z.array(z.object({ pattern: z.string(), limit: LimitSchema }));
const Manifest = z
  .object({
    rate_limits: z.object({
      publish: LimitSchema,
      subscribe: LimitSchema,
      token_issue: LimitSchema,
      read: LimitSchema,
      admin_auth: LimitSchema.openapi({ description: "Failed admin authentications per client IP." }),
      per_channel_publish: PerChannelLimits.optional(),
      per_channel_subscribe: PerChannelLimits.optional(),
    }),
    throttle: z.object({
      fallback_rate: z.number().openapi({
        description: "THROTTLE_FALLBACK_RATE: the drop rate when the KV value is missing, not a number, or unreadable.",
      }),
      target: TargetSchema.nullable(),
      targets: z.array(z.object({ pattern: z.string(), target: TargetSchema.nullable() })).optional(),
      thinning: z.array(z.string()).optional(),
      analytics_channel: z.string(),
      rate_cache_ms: z.number().int(),
      fast_period: z.string(),
      sampler_max_channels: z
        .number()
        .int()
        .openapi({ description: "SAMPLER_MAX_CHANNELS: most channels one sampler run visits, busiest first." }),
    }),
    messages: z
      .object({
        max_bytes: z.number().int().openapi({ description: "MAX_MESSAGE_BYTES: the largest accepted message body." }),
        history_limit: z
          .number()
          .int()
          .openapi({ description: "HISTORY_LIMIT: messages kept per channel for resume and history." }),
        history_ttl: z.string().openapi({
          description: "HISTORY_TTL: how long an idle channel keeps its history after its last publish.",
        }),
        frame_delay: z
          .string()
          .openapi({ description: 'FRAME_DELAY: the longest a relay holds a packed frame back ("0s": never).' }),
      })
      .openapi({ description: "What a channel takes and keeps, and how long a packed frame may wait." }),
    tokens: z.object({
      session_ttl: z
        .string()
        .openapi({ description: "SESSION_TTL: the longest a refresh chain lives after its first mint." }),
    }),
    record: z.object({
      retention: z.string().openapi({ description: "RECORD_RETENTION: how long the record keeps a copy." }),
      analytics_retention: z
        .string()
        .openapi({ description: "ANALYTICS_RETENTION: how long the analytics channel pages copies." }),
    }),
    summaries: z.object({
      interval: z.string().openapi({ description: "SUMMARY_INTERVAL: the period of summary frames." }),
      rules: z
        .array(
          z.object({ pattern: z.string(), pointer: z.string().openapi({ description: "A JSON Pointer (RFC 6901)." }) }),
        )
        .optional()
        .openapi({ description: "THROTTLE_SUMMARY, in selection order (most specific first); omitted when empty." }),
    }),
    conflate_keys: z
      .array(
        z.object({ pattern: z.string(), pointer: z.string().openapi({ description: "A JSON Pointer (RFC 6901)." }) }),
      )
      .openapi({
        description:
          "CONFLATE_KEYS, in selection order (most specific first): on a matching channel a subscriber with a " +
          "`max_rate` holds the latest message per value at the pointer instead of skipping it.",
      }),
    presence: z.object({
      announce_max: z
        .number()
        .int()
        .openapi({ description: "PRESENCE_ANNOUNCE_MAX: largest occupancy announced per join and leave." }),
      interval: z.string().openapi({ description: "PRESENCE_INTERVAL: period of interval presence above it." }),
    }),
    audience_shards: z
      .array(z.object({ pattern: z.string(), by: z.enum(["group", "continent"]) }))
      .openapi({ description: "AUDIENCE_SHARDS in selection order (most specific first); empty when none is set." }),
    cors_origins: z.array(z.string()).openapi({
      description:
        'CORS_ORIGINS: origins whose pages may call the API from a browser; "*": public reads from any origin.',
    }),
    audience: z
      .object({
        max_subscribers: z.number().int().openapi({ description: "MAX_SUBSCRIBERS: most subscribers of one channel." }),
        relay_capacity: z.number().int().openapi({ description: "RELAY_CAPACITY: most subscribers one relay holds." }),
        max_subscriptions_per_client: z
          .number()
          .int()
          .openapi({ description: "MAX_SUBSCRIPTIONS_PER_CLIENT: one client's subscriptions of one channel." }),
        anonymous_share: z.number().openapi({
          description: "ANONYMOUS_SHARE: the largest fraction of MAX_SUBSCRIBERS anonymous subscribers hold.",
        }),
        max_connections_per_client: z.number().int().openapi({
          description:
            "MAX_CONNECTIONS_PER_CLIENT: one client's subscriptions and Pusher connections over all channels.",
        }),
      })
      .openapi({ description: "Who may hold a channel's places (docs/api.md, Relays)." }),
    metrics: z.object({
      flush_ms: z.number().int().openapi({
        description: "METRICS_FLUSH_MS: least time between two metric flushes from one isolate, in ms.",
      }),
    }),
    pusher: z
      .object({
        enabled: z
          .boolean()
          .openapi({ description: "Open when PUSHER_APP_ID, PUSHER_APP_KEY and the secret are set." }),
        app_id: z.string().nullable(),
        key: z.string().nullable().openapi({ description: "The key Pusher clients connect with (null: closed)." }),
        client_events_rate: LimitSchema.openapi({ description: "PUSHER_CLIENT_EVENTS_RATE, per connection." }),
        activity_timeout: z.number().int().openapi({ description: "PUSHER_ACTIVITY_TIMEOUT, in seconds." }),
      })
      .openapi({ description: "The Pusher door (never its secret)." }),
  })
  .openapi("Manifest");

// The schema documents the very shape the route returns (src/wire/manifest.ts, which the client ships):
// a field added to one and not the other fails the typecheck.
type Same<A, B> = [A] extends [B] ? ([B] extends [A] ? true : false) : false;
export const schemaIsTheWireShape: Same<z.infer<typeof Manifest>, ManifestJson> = true;

const manifestRoute = route({
  method: "get",
  path: "/v1/manifest",
  summary: "Budgets and throttle settings (public)",
  responses: { 200: json(Manifest, "The manifest; per-token overrides never appear."), ...errors(500) },
});

manifestRoutes.get(documented(manifestRoutes, manifestRoute), (c) => c.json(manifest(c.var.svc.config)));
