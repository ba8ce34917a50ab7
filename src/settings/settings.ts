/**
 * The settings (docs/operations.md, Configuration): every variable parsed once per isolate into one
 * typed object, validated as a whole, and read one way everywhere — the Worker and every object call
 * {@link settingsOf}. Invalid configuration fails closed the same way everywhere: {@link settingsOf}
 * throws the {@link ConfigError} naming the variable, every API route answers 500 naming it, and
 * `scripts/check-config.mjs` (run by `npm run deploy`) refuses to upload it. Defaults and bounds are
 * in ./variables.ts only.
 */
import { PointerError, parsePointer } from "../../functions/drop-summary";
import { type ChannelName, type ChannelPattern, parseChannelName, type Rule } from "../wire/channel-names";
import { type Limit, parseLimit } from "./limits";
import {
  budget,
  ConfigError,
  configPattern,
  duration,
  fraction,
  patternRules,
  textOf,
  wholeNumber,
  wrap,
} from "./parsers";
import { PUSHER_SECRET, type PusherSettings, parsePusher } from "./pusher";
import { parseShardRule, type ShardRule } from "./shards";
import { parseTarget, type Target } from "./targets";
import {
  CONFIG_VARIABLES,
  MAX_FRAME_DELAY_MS,
  MAX_PRESENCE_ANNOUNCE,
  MAX_PRESENCE_INTERVAL_MS,
  MAX_RELAY_CAPACITY,
  MAX_SUMMARY_INTERVAL_MS,
  MIN_FAST_PERIOD_MS,
  MIN_PRESENCE_INTERVAL_MS,
  MIN_SUMMARY_INTERVAL_MS,
  type RawConfig,
} from "./variables";

export { ConfigError } from "./parsers";
export { CONFIG_VARIABLES, type ConfigVariable, type RawConfig, REQUIRED_BUDGETS } from "./variables";

export interface Settings {
  /** Default budgets; null means disabled. */
  publish: Limit | null;
  subscribe: Limit | null;
  tokenIssue: Limit | null;
  /** Reads per client IP: history, and subscribes without a verified token (docs/api.md, Bounds). */
  read: Limit | null;
  /** Failed admin authentications per client IP (docs/security.md, "Guessing the admin token"). */
  adminAuth: Limit | null;
  perChannelPublish: Rule<Limit | null>[];
  perChannelSubscribe: Rule<Limit | null>[];
  throttleFallbackRate: number;
  throttleTarget: Target | null;
  throttleTargets: Rule<Target | null>[];
  /** How long an isolate reuses a drop rate read from KV, in ms. */
  rateCacheMs: number;
  /** Channels whose drops use deterministic thinning instead of a random draw. */
  throttleThinning: ChannelPattern[];
  /** Period of the channel object's fast throttle loop, in ms (docs/throttling.md, "Two loops"). */
  samplerFastPeriodMs: number;
  /** Least time between two metric flushes from one isolate, in ms. */
  metricsFlushMs: number;
  analyticsChannel: ChannelName;
  maxMessageBytes: number;
  historyLimit: number;
  /** Longest a refresh chain lives after its first mint, in seconds. */
  sessionTtlSeconds: number;
  /** How long the analytics channel keeps each copy, in ms, counted from its `dropped_at`. */
  analyticsRetentionMs: number;
  /** How long the record (RECORD_BUCKET) keeps each copy, in ms, by its `dropped_at`; also the longest export. */
  recordRetentionMs: number;
  /** How long an idle channel keeps its history after its last publish, in ms (docs/operations.md). */
  historyTtlMs: number;
  /** Most channels one sampler run visits, busiest first (docs/operations.md). */
  samplerMaxChannels: number;
  /** Most subscribers one relay serves; a new relay opens when all of a group's are full (docs/api.md, "Relays"). */
  relayCapacity: number;
  /** Most subscribers one channel serves over all its relays; past it a subscribe answers 503. */
  maxSubscribers: number;
  /** Most open subscriptions one client (token `sub`, else IP or IPv6 /64) holds on one channel; past it 429. */
  maxSubscriptionsPerClient: number;
  /** Largest fraction of `maxSubscribers` anonymous subscribers hold on one channel; past it 503 (docs/api.md, "Relays"). */
  anonymousShare: number;
  /** Most open subscriptions and Pusher connections one client holds over all channels; past it 429 `connections`. */
  maxConnectionsPerClient: number;
  /** Longest a relay holds a packed frame back to pack more into it, in ms (docs/api.md, "Packed frames"). */
  frameDelayMs: number;
  // ---- summaries of drops (docs/api.md, "Summaries of drops") ----
  /** `THROTTLE_SUMMARY`: channel pattern → the JSON Pointer whose value groups a channel's drops. */
  throttleSummary: Rule<SummaryRule>[];
  /** `SUMMARY_INTERVAL`: the period of summary frames, in ms. */
  summaryIntervalMs: number;
  /** `CONFLATE_KEYS`: channel pattern → the JSON Pointer whose value is a message's conflation key. */
  conflateKeys: Rule<SummaryRule>[];
  /** Largest occupancy at which presence is announced per join and leave (docs/api.md, "Presence"). */
  presenceAnnounceMax: number;
  /** Period of interval presence above {@link Settings.presenceAnnounceMax}, in ms. */
  presenceIntervalMs: number;
  /** `AUDIENCE_SHARDS`: channels split into shards by a grouping, in selection order (docs/api.md, "Shards"). */
  audienceShards: Rule<ShardRule>[];
  /** `CORS_ORIGINS`: the origins whose pages may call the API from a browser (docs/api.md, "Browsers on other origins"). */
  cors: CorsOrigins;
  /** The Pusher door (docs/api.md, "The Pusher door"); `app` null: closed. */
  pusher: PusherSettings;
}

/** `CORS_ORIGINS` parsed: the origins listed, and whether `*` (public reads from any origin) is. */
export interface CorsOrigins {
  origins: ReadonlySet<string>;
  anyForPublicReads: boolean;
}

/** A `THROTTLE_SUMMARY` (or `CONFLATE_KEYS`) rule's pointer, as written and parsed into its reference tokens. */
export interface SummaryRule {
  pointer: string;
  tokens: string[];
}

/** A `THROTTLE_SUMMARY` or `CONFLATE_KEYS` value: a JSON Pointer (RFC 6901) as a string. @throws PointerError */
function summaryRule(value: unknown): SummaryRule {
  if (typeof value !== "string") throw new PointerError('the value must be a JSON Pointer string such as "/emoji"');
  return { pointer: value, tokens: parsePointer(value) };
}

/** `RELAY_CAPACITY`: a whole number from 1 to {@link MAX_RELAY_CAPACITY}, with the reason for the bound. */
function relayCapacity(raw: RawConfig): number {
  const n = wholeNumber(raw, "RELAY_CAPACITY");
  if (n > MAX_RELAY_CAPACITY) {
    throw new ConfigError(
      "RELAY_CAPACITY",
      `"${n}" is more WebSockets than one object may hold (${MAX_RELAY_CAPACITY})`,
    );
  }
  return n;
}

/** A duration with days allowed (`30d`, `36h`), at least one second. Returns milliseconds. */
function longDuration(raw: RawConfig, variable: Parameters<typeof textOf>[1]): number {
  return duration(raw, variable, 1000, Number.POSITIVE_INFINITY, "at least 1s", { allowDays: true });
}

/**
 * `CORS_ORIGINS`: comma-separated origins written as a browser sends them (`https://app.example`,
 * `http://localhost:5173`: a scheme, a host, a port only when not the scheme's default, no path),
 * and `*` for public reads from any origin; or the same entries as a TOML array of strings (which
 * arrives as its JSON text, {@link rawConfigFrom}). A malformed one is bad configuration, so a typo
 * never silently locks a web app out (or lets another in).
 */
export function corsOrigins(raw: RawConfig): CorsOrigins {
  const origins = new Set<string>();
  let anyForPublicReads = false;
  for (const part of corsEntries(textOf(raw, "CORS_ORIGINS"))) {
    const entry = part.trim();
    if (entry === "") continue;
    if (entry === "*") {
      anyForPublicReads = true;
      continue;
    }
    let origin: string | null = null;
    try {
      const url = new URL(entry);
      const host = /^(?:[a-z0-9-]+\.)*[a-z0-9-]+$|^\[[0-9a-f:.]+\]$/i.test(url.hostname);
      if ((url.protocol === "https:" || url.protocol === "http:") && host && url.origin === entry) origin = url.origin;
    } catch {
      // not a URL: refused below
    }
    if (origin === null) {
      throw new ConfigError(
        "CORS_ORIGINS",
        `"${entry}" is not an origin (scheme://host[:port], no path or trailing slash, e.g. https://app.example), nor *`,
      );
    }
    origins.add(origin);
  }
  return { origins, anyForPublicReads };
}

/** `CORS_ORIGINS`'s entries: a JSON array of strings (a TOML array) as they are, any other text split at commas. */
function corsEntries(text: string): string[] {
  if (!text.trimStart().startsWith("[")) return text.split(",");
  let list: unknown;
  try {
    list = JSON.parse(text);
  } catch {
    list = null;
  }
  if (!Array.isArray(list) || !list.every((e) => typeof e === "string")) {
    throw new ConfigError("CORS_ORIGINS", 'an array must hold only origins as strings, e.g. ["https://app.example"]');
  }
  return list;
}

/** Parses and validates every variable. @throws ConfigError naming the first bad variable. */
export function parseConfig(raw: RawConfig): Settings {
  const fallbackText = textOf(raw, "THROTTLE_FALLBACK_RATE");
  const fallback = Number(fallbackText);
  if (!Number.isFinite(fallback) || fallback < 0 || fallback > 1) {
    throw new ConfigError("THROTTLE_FALLBACK_RATE", `"${fallbackText}" must be a number in [0,1]`);
  }
  const analytics = wrap("ANALYTICS_CHANNEL", () => parseChannelName(textOf(raw, "ANALYTICS_CHANNEL")));
  // Every dropped private message is copied here: on a public channel anyone could read them.
  if (analytics.visibility !== "private") {
    throw new ConfigError("ANALYTICS_CHANNEL", `"${analytics.name}" must be a private: channel`);
  }
  return {
    publish: budget(raw, "PUBLISH_RATE", "PUBLISH_BURST"),
    subscribe: budget(raw, "SUBSCRIBE_RATE", "SUBSCRIBE_BURST"),
    tokenIssue: budget(raw, "TOKEN_ISSUE_RATE", "TOKEN_ISSUE_BURST"),
    read: budget(raw, "READ_RATE", "READ_BURST"),
    adminAuth: budget(raw, "ADMIN_AUTH_RATE", "ADMIN_AUTH_BURST"),
    perChannelPublish: patternRules(raw, "PER_CHANNEL_PUBLISH_LIMITS", parseLimit),
    perChannelSubscribe: patternRules(raw, "PER_CHANNEL_SUBSCRIBE_LIMITS", parseLimit),
    throttleFallbackRate: fallback,
    throttleTarget: wrap("THROTTLE_TARGET", () => parseTarget(textOf(raw, "THROTTLE_TARGET"))),
    throttleTargets: patternRules(raw, "THROTTLE_TARGETS", parseTarget),
    rateCacheMs: wholeNumber(raw, "THROTTLE_RATE_CACHE_MS", 0),
    throttleThinning: textOf(raw, "THROTTLE_THINNING")
      .split(",")
      .map((p) => p.trim())
      .filter((p) => p.length > 0)
      .map((p) => configPattern("THROTTLE_THINNING", p)),
    samplerFastPeriodMs: duration(
      raw,
      "SAMPLER_FAST_PERIOD",
      MIN_FAST_PERIOD_MS,
      Number.POSITIVE_INFINITY,
      "at least 1s",
    ),
    metricsFlushMs: wholeNumber(raw, "METRICS_FLUSH_MS", 0),
    analyticsChannel: analytics,
    maxMessageBytes: wholeNumber(raw, "MAX_MESSAGE_BYTES"),
    historyLimit: wholeNumber(raw, "HISTORY_LIMIT"),
    sessionTtlSeconds: Math.floor(longDuration(raw, "SESSION_TTL") / 1000),
    analyticsRetentionMs: longDuration(raw, "ANALYTICS_RETENTION"),
    recordRetentionMs: longDuration(raw, "RECORD_RETENTION"),
    historyTtlMs: longDuration(raw, "HISTORY_TTL"),
    samplerMaxChannels: wholeNumber(raw, "SAMPLER_MAX_CHANNELS"),
    relayCapacity: relayCapacity(raw),
    maxSubscribers: wholeNumber(raw, "MAX_SUBSCRIBERS"),
    maxSubscriptionsPerClient: wholeNumber(raw, "MAX_SUBSCRIPTIONS_PER_CLIENT"),
    anonymousShare: fraction(raw, "ANONYMOUS_SHARE"),
    maxConnectionsPerClient: wholeNumber(raw, "MAX_CONNECTIONS_PER_CLIENT"),
    frameDelayMs: duration(raw, "FRAME_DELAY", 0, MAX_FRAME_DELAY_MS, "from 0ms to 1s", { allowBareZero: true }),
    throttleSummary: patternRules(raw, "THROTTLE_SUMMARY", summaryRule),
    summaryIntervalMs: duration(
      raw,
      "SUMMARY_INTERVAL",
      MIN_SUMMARY_INTERVAL_MS,
      MAX_SUMMARY_INTERVAL_MS,
      "from 250ms to 1h",
    ),
    conflateKeys: patternRules(raw, "CONFLATE_KEYS", summaryRule),
    presenceAnnounceMax: wholeNumber(raw, "PRESENCE_ANNOUNCE_MAX", 0, MAX_PRESENCE_ANNOUNCE),
    presenceIntervalMs: duration(
      raw,
      "PRESENCE_INTERVAL",
      MIN_PRESENCE_INTERVAL_MS,
      MAX_PRESENCE_INTERVAL_MS,
      "from 1s to 1h",
    ),
    audienceShards: audienceShards(raw),
    pusher: parsePusher(raw, raw[PUSHER_SECRET]),
    cors: corsOrigins(raw),
  };
}

/**
 * `AUDIENCE_SHARDS`. A Pusher connection has no token to carry a group, so a `{"by":"group"}` rule
 * cannot cover `pusher:` names; by continent works for both doors.
 */
function audienceShards(raw: RawConfig): Rule<ShardRule>[] {
  const rules = patternRules(raw, "AUDIENCE_SHARDS", parseShardRule);
  for (const r of rules) {
    if (r.pattern.prefix === "pusher" && r.value.by === "group") {
      throw new ConfigError(
        "AUDIENCE_SHARDS",
        `${r.pattern.source}: pusher: channels cannot be sharded by group (a Pusher connection has no token group); use {"by":"continent"}`,
      );
    }
  }
  return rules;
}

/**
 * Picks the configuration variables out of an env object, each as its text. Wrangler passes a TOML
 * number or boolean as one, and a TOML table or array (a JSON value) as an object: that is read as
 * its JSON text, so it parses and fails exactly like the JSON-string form instead of counting as
 * absent (a rule silently off). @throws ConfigError for a value of any other kind.
 */
export function rawConfigFrom(env: object): RawConfig {
  const e = env as Record<string, unknown>;
  const raw: RawConfig = {};
  for (const k of [...CONFIG_VARIABLES, PUSHER_SECRET] as const) {
    const v = e[k];
    if (v === undefined) continue;
    if (typeof v === "string") raw[k] = v;
    else if (typeof v === "number" || typeof v === "boolean") raw[k] = String(v);
    else if (isJsonValue(v)) raw[k] = JSON.stringify(v);
    else throw new ConfigError(k, "must be a string, a number, or a JSON object (a TOML table)");
  }
  return raw;
}

/** A plain object or an array, as wrangler passes a TOML table or array (not a binding, not null). */
function isJsonValue(v: unknown): v is object {
  if (Array.isArray(v)) return true;
  if (v === null || typeof v !== "object") return false;
  const proto = Object.getPrototypeOf(v);
  return proto === Object.prototype || proto === null;
}

const cache = new WeakMap<object, Settings | ConfigError>();

/**
 * The settings for this env, parsed once per isolate (env is one object per isolate): how the
 * Worker and every object read them. @throws ConfigError when any variable is invalid — in an
 * object as in the Worker (the Worker answers 500 before any request reaches an object then).
 */
export function settingsOf(env: object): Settings {
  let c = cache.get(env);
  if (!c) {
    try {
      c = parseConfig(rawConfigFrom(env));
    } catch (e) {
      if (!(e instanceof ConfigError)) throw e;
      c = e;
    }
    cache.set(env, c);
  }
  if (c instanceof ConfigError) throw c;
  return c;
}
