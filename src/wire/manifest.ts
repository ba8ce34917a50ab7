/**
 * The public manifest's shape (`GET /v1/manifest`, docs/api.md, Operator routes): the deployment's
 * effective settings, one field per configuration variable, never a secret. Pure and self-contained,
 * so the TypeScript client ships it too; the Worker's `manifest()` returns exactly this type.
 */

/** A budget `{"rate","per","burst"}`; a disabled one is `{"rate":0,"per":"0s","burst":0}`. */
export interface ManifestLimit {
  rate: number;
  /** A canonical duration (`1s`, `500ms`, `1m30s`). */
  per: string;
  burst: number;
}

/** A sampler target: messages per second (`"50/s"`), or a delivery budget split across subscribers. */
export type ManifestTarget = string | { deliveries: string };

/** Durations are canonical text (`1m`, `1.5s`, `168h`); `*_ms` fields are whole milliseconds. */
export interface Manifest {
  rate_limits: {
    publish: ManifestLimit;
    subscribe: ManifestLimit;
    token_issue: ManifestLimit;
    read: ManifestLimit;
    admin_auth: ManifestLimit;
    /** `PER_CHANNEL_PUBLISH_LIMITS`, most specific first; omitted when empty. */
    per_channel_publish?: { pattern: string; limit: ManifestLimit }[];
    /** `PER_CHANNEL_SUBSCRIBE_LIMITS`, most specific first; omitted when empty. */
    per_channel_subscribe?: { pattern: string; limit: ManifestLimit }[];
  };
  throttle: {
    /** `THROTTLE_FALLBACK_RATE`: the drop rate when the KV value is missing, not a number or unreadable. */
    fallback_rate: number;
    target: ManifestTarget | null;
    /** `THROTTLE_TARGETS`, most specific first; a null target: that rule turns the default off. */
    targets?: { pattern: string; target: ManifestTarget | null }[];
    thinning?: string[];
    analytics_channel: string;
    rate_cache_ms: number;
    fast_period: string;
    /** `SAMPLER_MAX_CHANNELS`: most channels one sampler run visits, busiest first. */
    sampler_max_channels: number;
  };
  /** What a channel takes and keeps, and how long a relay holds a packed frame. */
  messages: {
    /** `MAX_MESSAGE_BYTES`: the largest accepted message body, in bytes. */
    max_bytes: number;
    /** `HISTORY_LIMIT`: messages kept per channel for resume and history. */
    history_limit: number;
    /** `HISTORY_TTL`: how long an idle channel keeps its history after its last publish. */
    history_ttl: string;
    /** `FRAME_DELAY`: the longest a relay holds a packed frame back (`0s`: never). */
    frame_delay: string;
  };
  tokens: {
    /** `SESSION_TTL`: the longest a refresh chain lives after its first mint. */
    session_ttl: string;
  };
  record: { retention: string; analytics_retention: string };
  summaries: { interval: string; rules?: { pattern: string; pointer: string }[] };
  conflate_keys: { pattern: string; pointer: string }[];
  presence: { announce_max: number; interval: string };
  audience_shards: { pattern: string; by: "group" | "continent" }[];
  cors_origins: string[];
  audience: {
    max_subscribers: number;
    relay_capacity: number;
    max_subscriptions_per_client: number;
    anonymous_share: number;
    max_connections_per_client: number;
  };
  metrics: {
    /** `METRICS_FLUSH_MS`: least time between two metric flushes from one isolate, so `/metrics` may lag by it. */
    flush_ms: number;
  };
  pusher: {
    enabled: boolean;
    app_id: string | null;
    key: string | null;
    client_events_rate: ManifestLimit;
    /** Seconds. */
    activity_timeout: number;
  };
}
