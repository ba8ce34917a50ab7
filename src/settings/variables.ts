/**
 * Every configuration variable Floodgate reads (docs/operations.md, Configuration), with its default
 * and its bounds: the one place either is written. The shipped values in wrangler.toml are what a
 * deployment states; these are what an absent (or, where a variable says so, empty) one means.
 */

/**
 * Each variable's default as text, parsed like a value the operator wrote; null: it has none — a
 * budget that must be stated ({@link REQUIRED_BUDGETS}), a burst that follows its rate, or a list
 * that is empty when absent.
 */
export const DEFAULTS = {
  PUBLISH_RATE: null,
  PUBLISH_BURST: null,
  SUBSCRIBE_RATE: null,
  SUBSCRIBE_BURST: null,
  TOKEN_ISSUE_RATE: null,
  TOKEN_ISSUE_BURST: null,
  READ_RATE: null,
  READ_BURST: null,
  ADMIN_AUTH_RATE: "10/m",
  ADMIN_AUTH_BURST: "20",
  PER_CHANNEL_PUBLISH_LIMITS: null,
  PER_CHANNEL_SUBSCRIBE_LIMITS: null,
  THROTTLE_FALLBACK_RATE: "0",
  THROTTLE_TARGET: null,
  THROTTLE_TARGETS: null,
  THROTTLE_RATE_CACHE_MS: "1000",
  THROTTLE_THINNING: null,
  SAMPLER_FAST_PERIOD: "5s",
  METRICS_FLUSH_MS: "1000",
  ANALYTICS_CHANNEL: "private:floodgate.analytics.dropped",
  MAX_MESSAGE_BYTES: "32768",
  HISTORY_LIMIT: "100",
  SESSION_TTL: "30d",
  ANALYTICS_RETENTION: "1d",
  RECORD_RETENTION: "30d",
  HISTORY_TTL: "7d",
  SAMPLER_MAX_CHANNELS: "500",
  RELAY_CAPACITY: "1000",
  MAX_SUBSCRIBERS: "100000",
  MAX_SUBSCRIPTIONS_PER_CLIENT: "20",
  ANONYMOUS_SHARE: "0.5",
  MAX_CONNECTIONS_PER_CLIENT: "100",
  FRAME_DELAY: "0ms",
  THROTTLE_SUMMARY: null,
  SUMMARY_INTERVAL: "1s",
  CONFLATE_KEYS: null,
  PRESENCE_ANNOUNCE_MAX: "20",
  PRESENCE_INTERVAL: "10s",
  AUDIENCE_SHARDS: null,
  CORS_ORIGINS: null,
  // The Pusher door (src/settings/pusher.ts); its secret, PUSHER_APP_SECRET, is a secret, not a variable.
  PUSHER_APP_ID: "",
  PUSHER_APP_KEY: "",
  PUSHER_CLIENT_EVENTS_RATE: "10/s",
  PUSHER_ACTIVITY_TIMEOUT: "120",
} as const satisfies Record<string, string | null>;

export type ConfigVariable = keyof typeof DEFAULTS;

/** Every variable, in the order docs/operations.md lists them. */
export const CONFIG_VARIABLES = Object.keys(DEFAULTS) as ConfigVariable[];

/**
 * Raw variables as they arrive in `env` (all strings; absent ones take {@link DEFAULTS}), and the one
 * secret the settings read: `PUSHER_APP_SECRET` decides, with the door's id and key, whether the
 * Pusher door is open (src/settings/pusher.ts).
 */
export type RawConfig = Partial<Record<ConfigVariable | "PUSHER_APP_SECRET", string>>;

/**
 * The budgets a deployment must state: absent, they fail closed, since a variable lost in a copied
 * or hand-edited wrangler.toml would otherwise switch its budget off unnoticed. Only an explicit
 * empty string disables one.
 */
export const REQUIRED_BUDGETS = ["PUBLISH_RATE", "SUBSCRIBE_RATE", "TOKEN_ISSUE_RATE", "READ_RATE"] as const;

/**
 * Most WebSockets one Durable Object may hold with the Hibernation API: the largest `RELAY_CAPACITY`.
 * A relay is meant to stay far below it (CPU binds first: each batch is one send per socket).
 */
export const MAX_RELAY_CAPACITY = 32_768;

/** The shortest `SAMPLER_FAST_PERIOD`: below 1 s a period holds too few messages to measure a rate. */
export const MIN_FAST_PERIOD_MS = 1000;

/** The longest `FRAME_DELAY`: a subscriber asked for packed frames, not for messages a second late. */
export const MAX_FRAME_DELAY_MS = 1000;

/** The shortest `SUMMARY_INTERVAL`: each interval with drops costs one frame per subscriber. */
export const MIN_SUMMARY_INTERVAL_MS = 250;
/** The longest `SUMMARY_INTERVAL`: a summary an hour late tells the audience nothing. */
export const MAX_SUMMARY_INTERVAL_MS = 3_600_000;

/**
 * The largest `PRESENCE_ANNOUNCE_MAX`: announce mode sends every relay one frame per join and leave
 * and lists every subject, so its cost must stay that of a small room.
 */
export const MAX_PRESENCE_ANNOUNCE = 1000;

/** The shortest `PRESENCE_INTERVAL`: the interval frame is what bounds a crowd's presence cost. */
export const MIN_PRESENCE_INTERVAL_MS = 1000;
/** The longest `PRESENCE_INTERVAL`. */
export const MAX_PRESENCE_INTERVAL_MS = 3_600_000;
