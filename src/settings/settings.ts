/**
 * Configuration (docs/operations.md, Configuration), parsed once per isolate and validated as a whole.
 *
 * Invalid configuration fails closed: every API route answers 500 naming the variable, and
 * `scripts/check-config.mjs` (run by `npm run deploy`) refuses to upload it.
 */
import { PointerError, parsePointer } from "../../functions/drop-summary";
import type { SamplerTarget } from "../../functions/sampler";
import {
  anyPatternMatches,
  type ChannelName,
  type ChannelPattern,
  compileRules,
  GrammarError,
  parseChannelName,
  parsePattern,
  type Rule,
  selectRule,
} from "../wire/channel-names";
import { DurationError, parseDuration } from "./durations";
import { type Limit, LimitError, normaliseBurst, parseLimit, parseRateShorthand } from "./limits";
import { parseShardRule, type ShardRule } from "./shards";

/**
 * A configured sampler target (functions/sampler.ts, `SamplerTarget`: messages per second delivered,
 * or a delivery budget split across subscribers) with the text it was written as.
 */
export type Target = SamplerTarget & { source: string };

/** A target as the API shows and takes it: a shorthand such as "50/s", or {"deliveries": "5000/s"}. */
export type TargetJson = string | { deliveries: string };

/** The target as the API shows it (the inverse of {@link parseTarget}). */
export function targetJson(t: Target): TargetJson;
export function targetJson(t: Target | null): TargetJson | null;
export function targetJson(t: Target | null): TargetJson | null {
  if (!t) return null;
  return t.kind === "messages" ? t.source : { deliveries: t.source };
}

export interface Config {
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
  /** Longest a relay holds a packed frame back to pack more into it, in ms (docs/api.md, "Packed frames"). */
  frameDelayMs: number;
  // ---- summaries of drops (docs/api.md, "Summaries of drops") ----
  /** `THROTTLE_SUMMARY`: channel pattern → the JSON Pointer whose value groups a channel's drops. */
  throttleSummary: Rule<SummaryRule>[];
  /** `SUMMARY_INTERVAL`: the period of summary frames, in ms. */
  summaryIntervalMs: number;
  /** Largest occupancy at which presence is announced per join and leave (docs/api.md, "Presence"). */
  presenceAnnounceMax: number;
  /** Period of interval presence above {@link Config.presenceAnnounceMax}, in ms. */
  presenceIntervalMs: number;
  /** `AUDIENCE_SHARDS`: channels split into shards by a grouping, in selection order (docs/api.md, "Shards"). */
  audienceShards: Rule<ShardRule>[];
}

/** A `THROTTLE_SUMMARY` rule's pointer, as written and parsed into its reference tokens. */
export interface SummaryRule {
  pointer: string;
  tokens: string[];
}

/** Raw variables as they arrive in `env` (all strings; absent ones take the defaults docs/operations.md lists, {@link REQUIRED_BUDGETS} excepted). */
export type RawConfig = Partial<Record<ConfigVariable, string>>;

export const CONFIG_VARIABLES = [
  "PUBLISH_RATE",
  "PUBLISH_BURST",
  "SUBSCRIBE_RATE",
  "SUBSCRIBE_BURST",
  "TOKEN_ISSUE_RATE",
  "TOKEN_ISSUE_BURST",
  "READ_RATE",
  "READ_BURST",
  "ADMIN_AUTH_RATE",
  "ADMIN_AUTH_BURST",
  "PER_CHANNEL_PUBLISH_LIMITS",
  "PER_CHANNEL_SUBSCRIBE_LIMITS",
  "THROTTLE_FALLBACK_RATE",
  "THROTTLE_TARGET",
  "THROTTLE_TARGETS",
  "THROTTLE_RATE_CACHE_MS",
  "THROTTLE_THINNING",
  "SAMPLER_FAST_PERIOD",
  "METRICS_FLUSH_MS",
  "ANALYTICS_CHANNEL",
  "MAX_MESSAGE_BYTES",
  "HISTORY_LIMIT",
  "SESSION_TTL",
  "ANALYTICS_RETENTION",
  "RECORD_RETENTION",
  "HISTORY_TTL",
  "SAMPLER_MAX_CHANNELS",
  "RELAY_CAPACITY",
  "MAX_SUBSCRIBERS",
  "MAX_SUBSCRIPTIONS_PER_CLIENT",
  "FRAME_DELAY",
  "THROTTLE_SUMMARY",
  "SUMMARY_INTERVAL",
  "PRESENCE_ANNOUNCE_MAX",
  "PRESENCE_INTERVAL",
  "AUDIENCE_SHARDS",
] as const;
export type ConfigVariable = (typeof CONFIG_VARIABLES)[number];

/** A variable that does not parse. The message names the variable and the bad value. */
export class ConfigError extends Error {
  readonly variable: string;
  constructor(variable: string, detail: string) {
    super(`invalid configuration: ${variable}: ${detail}`);
    this.name = "ConfigError";
    this.variable = variable;
  }
}

function wrap<T>(variable: string, f: () => T): T {
  try {
    return f();
  } catch (e) {
    if (e instanceof ConfigError) throw e;
    if (
      e instanceof LimitError ||
      e instanceof GrammarError ||
      e instanceof DurationError ||
      e instanceof PointerError ||
      e instanceof SyntaxError ||
      e instanceof RangeError
    ) {
      throw new ConfigError(variable, e.message);
    }
    throw e;
  }
}

/**
 * The budgets a deployment must state (docs/operations.md, Configuration): absent, they fail closed,
 * since a variable lost in a copied or hand-edited wrangler.toml would otherwise switch its budget off
 * unnoticed. Only an explicit empty string disables one.
 */
export const REQUIRED_BUDGETS = ["PUBLISH_RATE", "SUBSCRIBE_RATE", "TOKEN_ISSUE_RATE", "READ_RATE"] as const;

/** A budget from its rate and burst variables; `fallback` null: the rate variable must be present. */
function budget(
  raw: RawConfig,
  rateVar: ConfigVariable,
  burstVar: ConfigVariable,
  fallback: string | null,
  burstFallback = "",
): Limit | null {
  const given = raw[rateVar];
  if (given === undefined && fallback === null) {
    throw new ConfigError(rateVar, 'is not set (set it to a rate such as "10/s", or to "" to disable this budget)');
  }
  const rateText = given ?? fallback ?? "";
  const rate = wrap(rateVar, () => parseRateShorthand(rateText));
  const burstText = raw[burstVar] ?? burstFallback;
  // Validate the burst even when the budget is disabled, so a typo is never silently ignored.
  const burst = wrap(burstVar, () => normaliseBurst(rate?.rate ?? 1, burstText));
  return rate ? { ...rate, burst } : null;
}

function jsonObject(variable: string, text: string | undefined): Record<string, unknown> {
  const t = (text ?? "").trim();
  if (t === "") return {};
  return wrap(variable, () => {
    const v: unknown = JSON.parse(t);
    if (v === null || typeof v !== "object" || Array.isArray(v)) {
      throw new ConfigError(variable, "must be a JSON object of channel pattern → value");
    }
    return v as Record<string, unknown>;
  });
}

function patternRules<T>(variable: string, text: string | undefined, parse: (v: unknown) => T): Rule<T>[] {
  const obj = jsonObject(variable, text);
  return wrap(variable, () =>
    compileRules(
      Object.entries(obj).map(([pattern, v]) => {
        try {
          return [pattern, parse(v)] as const;
        } catch (e) {
          if (e instanceof Error) throw new ConfigError(variable, `${pattern}: ${e.message}`);
          throw e;
        }
      }),
    ),
  );
}

/** Parses a target: shorthand (`"100/s"`, messages per second) or `{"deliveries":"5000/s"}`. */
export function parseTarget(value: unknown): Target | null {
  if (typeof value === "string") {
    const r = parseRateShorthand(value);
    return r ? { kind: "messages", perSecond: (r.rate * 1000) / r.perMs, source: value.trim() } : null;
  }
  if (value !== null && typeof value === "object" && !Array.isArray(value)) {
    const o = value as Record<string, unknown>;
    const keys = Object.keys(o);
    if (keys.length === 1 && keys[0] === "deliveries" && typeof o.deliveries === "string") {
      const r = parseRateShorthand(o.deliveries);
      return r ? { kind: "deliveries", perSecond: (r.rate * 1000) / r.perMs, source: o.deliveries.trim() } : null;
    }
  }
  throw new LimitError('a target must be a shorthand such as "100/s" or {"deliveries":"5000/s"}');
}

function positiveInt(variable: string, text: string | undefined, fallback: number, min = 1): number {
  const t = (text ?? "").trim();
  if (t === "") return fallback;
  if (!/^\d+$/.test(t) || !Number.isSafeInteger(Number(t)) || Number(t) < min) {
    throw new ConfigError(variable, `"${t}" must be a whole number ≥ ${min}`);
  }
  return Number(t);
}

/**
 * A duration variable with days allowed (`30d`, `36h`), at least one second: `SESSION_TTL`,
 * `ANALYTICS_RETENTION`, `RECORD_RETENTION`, `HISTORY_TTL`. Returns milliseconds.
 */
function longDuration(variable: string, text: string | undefined, fallback: string): number {
  const t = (text ?? "").trim() || fallback;
  const ms = wrap(variable, () => parseDuration(t, { allowDays: true }));
  if (!(ms >= 1000)) throw new ConfigError(variable, `"${t}" must be at least 1s`);
  return ms;
}

/**
 * Most WebSockets one Durable Object may hold with the Hibernation API; a relay is meant to stay far
 * below it (CPU binds first: each batch is one send per socket on one thread).
 */
export const MAX_RELAY_CAPACITY = 32_768;

/** `RELAY_CAPACITY`: a whole number from 1 to {@link MAX_RELAY_CAPACITY}. */
function relayCapacity(text: string | undefined): number {
  const n = positiveInt("RELAY_CAPACITY", text, 1000);
  if (n > MAX_RELAY_CAPACITY) {
    throw new ConfigError(
      "RELAY_CAPACITY",
      `"${n}" is more WebSockets than one object may hold (${MAX_RELAY_CAPACITY})`,
    );
  }
  return n;
}

/** The shortest fast-loop period: below 1 s a period holds too few messages to measure a rate. */
export const MIN_FAST_PERIOD_MS = 1000;

/** `SAMPLER_FAST_PERIOD`: a duration (`5s`, `2.5s`, `1m`) of at least {@link MIN_FAST_PERIOD_MS}. */
function fastPeriod(text: string | undefined): number {
  const t = (text ?? "").trim() || "5s";
  const ms = wrap("SAMPLER_FAST_PERIOD", () => parseDuration(t));
  if (!(ms >= MIN_FAST_PERIOD_MS)) throw new ConfigError("SAMPLER_FAST_PERIOD", `"${t}" must be at least 1s`);
  return ms;
}

/** The longest `FRAME_DELAY`: a subscriber asked for packed frames, not for messages a second late. */
export const MAX_FRAME_DELAY_MS = 1000;

/** `FRAME_DELAY`: a duration from 0 (`0ms`, nothing waits) to {@link MAX_FRAME_DELAY_MS}. */
function frameDelay(text: string | undefined): number {
  const t = (text ?? "").trim() || "0ms";
  const ms = wrap("FRAME_DELAY", () => parseDuration(t, { allowBareZero: true }));
  if (!(ms >= 0 && ms <= MAX_FRAME_DELAY_MS)) throw new ConfigError("FRAME_DELAY", `"${t}" must be from 0ms to 1s`);
  return ms;
}

// ---- summaries of drops (docs/api.md, "Summaries of drops") ----

/** A `THROTTLE_SUMMARY` value: a JSON Pointer (RFC 6901) as a string. @throws PointerError */
function summaryRule(value: unknown): SummaryRule {
  if (typeof value !== "string") throw new PointerError('the value must be a JSON Pointer string such as "/emoji"');
  return { pointer: value, tokens: parsePointer(value) };
}

/** The shortest `SUMMARY_INTERVAL`: each interval with drops costs one frame per subscriber. */
export const MIN_SUMMARY_INTERVAL_MS = 250;
/** The longest `SUMMARY_INTERVAL`: a summary an hour late tells the audience nothing. */
export const MAX_SUMMARY_INTERVAL_MS = 3_600_000;

/** `SUMMARY_INTERVAL`: a duration from {@link MIN_SUMMARY_INTERVAL_MS} to {@link MAX_SUMMARY_INTERVAL_MS}; default `1s`. */
function summaryInterval(text: string | undefined): number {
  const t = (text ?? "").trim() || "1s";
  const ms = wrap("SUMMARY_INTERVAL", () => parseDuration(t));
  if (!(ms >= MIN_SUMMARY_INTERVAL_MS && ms <= MAX_SUMMARY_INTERVAL_MS)) {
    throw new ConfigError("SUMMARY_INTERVAL", `"${t}" must be from 250ms to 1h`);
  }
  return ms;
}

// ---- presence (docs/api.md, "Presence") ----

/**
 * The largest `PRESENCE_ANNOUNCE_MAX`: announce mode sends every relay one frame per join and leave
 * and lists every subject, so its cost must stay that of a small room.
 */
export const MAX_PRESENCE_ANNOUNCE = 1000;

/** `PRESENCE_ANNOUNCE_MAX`: a whole number from 0 (never announce) to {@link MAX_PRESENCE_ANNOUNCE}. */
function presenceAnnounceMax(text: string | undefined): number {
  const n = positiveInt("PRESENCE_ANNOUNCE_MAX", text, 20, 0);
  if (n > MAX_PRESENCE_ANNOUNCE) {
    throw new ConfigError("PRESENCE_ANNOUNCE_MAX", `"${n}" must be at most ${MAX_PRESENCE_ANNOUNCE}`);
  }
  return n;
}

/** The shortest `PRESENCE_INTERVAL`: the interval frame is what bounds a crowd's presence cost. */
export const MIN_PRESENCE_INTERVAL_MS = 1000;

/** `PRESENCE_INTERVAL`: a duration of at least {@link MIN_PRESENCE_INTERVAL_MS}, at most 1 h. */
function presenceInterval(text: string | undefined): number {
  const t = (text ?? "").trim() || "10s";
  const ms = wrap("PRESENCE_INTERVAL", () => parseDuration(t));
  if (!(ms >= MIN_PRESENCE_INTERVAL_MS && ms <= 3_600_000)) {
    throw new ConfigError("PRESENCE_INTERVAL", `"${t}" must be from 1s to 1h`);
  }
  return ms;
}

/** The summary rule of a channel (`THROTTLE_SUMMARY`, most specific wins), or null: no summaries. */
export function summaryFor(config: Config, channel: ChannelName): SummaryRule | null {
  if (channel.name === config.analyticsChannel.name) return null; // never throttled, so nothing to sum
  return selectRule(config.throttleSummary, channel)?.value ?? null;
}

/** Parses and validates every variable. @throws ConfigError naming the first bad variable. */
export function parseConfig(raw: RawConfig): Config {
  const fallbackText = (raw.THROTTLE_FALLBACK_RATE ?? "").trim() || "0";
  const fallback = Number(fallbackText);
  if (!Number.isFinite(fallback) || fallback < 0 || fallback > 1) {
    throw new ConfigError("THROTTLE_FALLBACK_RATE", `"${fallbackText}" must be a number in [0,1]`);
  }
  const analytics = wrap("ANALYTICS_CHANNEL", () =>
    parseChannelName((raw.ANALYTICS_CHANNEL ?? "").trim() || "private:floodgate.analytics.dropped"),
  );
  // Every dropped private message is copied here: on a public channel anyone could read them.
  if (analytics.visibility !== "private") {
    throw new ConfigError("ANALYTICS_CHANNEL", `"${analytics.name}" must be a private: channel`);
  }
  return {
    publish: budget(raw, "PUBLISH_RATE", "PUBLISH_BURST", null),
    subscribe: budget(raw, "SUBSCRIBE_RATE", "SUBSCRIBE_BURST", null),
    tokenIssue: budget(raw, "TOKEN_ISSUE_RATE", "TOKEN_ISSUE_BURST", null),
    read: budget(raw, "READ_RATE", "READ_BURST", null),
    adminAuth: budget(raw, "ADMIN_AUTH_RATE", "ADMIN_AUTH_BURST", "10/m", "20"),
    perChannelPublish: patternRules("PER_CHANNEL_PUBLISH_LIMITS", raw.PER_CHANNEL_PUBLISH_LIMITS, parseLimit),
    perChannelSubscribe: patternRules("PER_CHANNEL_SUBSCRIBE_LIMITS", raw.PER_CHANNEL_SUBSCRIBE_LIMITS, parseLimit),
    throttleFallbackRate: fallback,
    throttleTarget: wrap("THROTTLE_TARGET", () => parseTarget(raw.THROTTLE_TARGET ?? "")),
    throttleTargets: patternRules("THROTTLE_TARGETS", raw.THROTTLE_TARGETS, parseTarget),
    rateCacheMs: positiveInt("THROTTLE_RATE_CACHE_MS", raw.THROTTLE_RATE_CACHE_MS, 1000, 0),
    throttleThinning: wrap("THROTTLE_THINNING", () =>
      (raw.THROTTLE_THINNING ?? "")
        .split(",")
        .map((p) => p.trim())
        .filter((p) => p.length > 0)
        .map((p) => parsePattern(p)),
    ),
    samplerFastPeriodMs: fastPeriod(raw.SAMPLER_FAST_PERIOD),
    metricsFlushMs: positiveInt("METRICS_FLUSH_MS", raw.METRICS_FLUSH_MS, 1000, 0),
    analyticsChannel: analytics,
    maxMessageBytes: positiveInt("MAX_MESSAGE_BYTES", raw.MAX_MESSAGE_BYTES, 32768),
    historyLimit: positiveInt("HISTORY_LIMIT", raw.HISTORY_LIMIT, 100),
    sessionTtlSeconds: Math.floor(longDuration("SESSION_TTL", raw.SESSION_TTL, "30d") / 1000),
    analyticsRetentionMs: longDuration("ANALYTICS_RETENTION", raw.ANALYTICS_RETENTION, "1d"),
    recordRetentionMs: longDuration("RECORD_RETENTION", raw.RECORD_RETENTION, "30d"),
    historyTtlMs: longDuration("HISTORY_TTL", raw.HISTORY_TTL, "7d"),
    samplerMaxChannels: positiveInt("SAMPLER_MAX_CHANNELS", raw.SAMPLER_MAX_CHANNELS, 500),
    relayCapacity: relayCapacity(raw.RELAY_CAPACITY),
    maxSubscribers: positiveInt("MAX_SUBSCRIBERS", raw.MAX_SUBSCRIBERS, 100_000),
    maxSubscriptionsPerClient: positiveInt("MAX_SUBSCRIPTIONS_PER_CLIENT", raw.MAX_SUBSCRIPTIONS_PER_CLIENT, 20),
    frameDelayMs: frameDelay(raw.FRAME_DELAY),
    throttleSummary: patternRules("THROTTLE_SUMMARY", raw.THROTTLE_SUMMARY, summaryRule),
    summaryIntervalMs: summaryInterval(raw.SUMMARY_INTERVAL),
    presenceAnnounceMax: presenceAnnounceMax(raw.PRESENCE_ANNOUNCE_MAX),
    presenceIntervalMs: presenceInterval(raw.PRESENCE_INTERVAL),
    audienceShards: patternRules("AUDIENCE_SHARDS", raw.AUDIENCE_SHARDS, parseShardRule),
  };
}

/** Picks the configuration variables out of an env object. */
export function rawConfigFrom(env: object): RawConfig {
  const e = env as Record<string, unknown>;
  const raw: RawConfig = {};
  for (const k of CONFIG_VARIABLES) {
    const v = e[k];
    if (typeof v === "string") raw[k] = v;
    else if (typeof v === "number" || typeof v === "boolean") raw[k] = String(v);
  }
  return raw;
}

const cache = new WeakMap<object, Config | ConfigError>();

/**
 * The parsed configuration for this env, computed once per isolate (env is one object per isolate).
 * @throws ConfigError when any variable is invalid.
 */
export function getConfig(env: object): Config {
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

/** The target for a channel: most specific `THROTTLE_TARGETS` pattern, else `THROTTLE_TARGET`. */
export function targetFor(config: Config, channel: ChannelName): Target | null {
  if (channel.name === config.analyticsChannel.name) return null; // never throttled
  const rule = selectRule(config.throttleTargets, channel);
  return rule ? rule.value : config.throttleTarget;
}

/** Whether a channel's drops use deterministic thinning (`THROTTLE_THINNING`). */
export function thinningFor(config: Config, channel: ChannelName): boolean {
  return anyPatternMatches(config.throttleThinning, channel);
}
