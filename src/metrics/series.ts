/**
 * The deployment's metrics as series (docs/operations.md, Metrics): each family's help text, how a
 * series is keyed by its name and labels, and the Prometheus text of them all. Pure: the Worker's
 * buffer (./metrics-buffer.ts) counts by these keys, the metrics object (./metrics-store.ts)
 * sums them, `GET /metrics` renders them.
 */
import { isUnavailableReason, UNAVAILABLE_REASONS } from "../wire/errors";

/** The help text of each metric family, which is also the list of families rendered. */
export const METRIC_HELP: Record<string, string> = {
  floodgate_rate_limit_decisions_total: "Rate-limit decisions by bucket and result.",
  floodgate_rate_limit_errors_total: "Rate-limiter failures (requests failed closed) by bucket.",
  floodgate_rate_limit_deny_cache_hits_total:
    "Denials answered from an isolate's deny cache, without a limiter object call, by bucket.",
  floodgate_rate_limit_lease_hits_total:
    "Admissions paid from tokens an isolate holds on lease, without a limiter object call, by bucket.",
  floodgate_messages_total: "Published messages by result (delivered or dropped by the throttle).",
  floodgate_record_copies_total:
    "Copies of dropped messages written to the record (RECORD_BUCKET), each once (dropped = record copies + record failures).",
  floodgate_record_failures_total:
    "Copies of dropped messages not recorded: refused by the drops queue, too large for a queue message, turned away by an isolate's full copy queue, or given up after the queue's retries.",
  floodgate_record_queue_messages_total:
    "Messages sent to the drops queue (DROPS_QUEUE), each carrying many copies of dropped messages.",
  floodgate_record_objects_written_total:
    "Objects written to the record (RECORD_BUCKET) by the drops queue's consumer, redeliveries included.",
  floodgate_record_expired_total: "Copies in record objects deleted by RECORD_RETENTION (the Cron sweep).",
  floodgate_analytics_copy_failures_total:
    "Copies of dropped messages that never reached the analytics channel (the record's live view): those that failed before the drops queue, and those given up after the queue's retries (dropped = kept + expired + these).",
  floodgate_analytics_copies_unsettled_total:
    "Copies of dropped messages in a send that did not settle within 5 s (its request was cut off): each reached the drops queue or was lost.",
  floodgate_analytics_copies_total:
    "Copies of dropped messages appended to the analytics channel by the queue's consumer (at least once).",
  floodgate_analytics_expired_total:
    "Copies on the analytics channel deleted by ANALYTICS_RETENTION (counted by its object, read at scrape time).",
  floodgate_object_calls_total:
    "Durable Object calls made by the Worker, by object (channel, analytics, limiter); metric flushes not included.",
  floodgate_kv_reads_total: "Drop-rate reads from Workers KV (isolate cache misses).",
  floodgate_publish_overflow_total:
    "Publishes refused with 503 because an isolate's waiting publishes were at their byte cap.",
  // The Pusher door (docs/api.md, "The Pusher door").
  floodgate_pusher_errors_total:
    "Pusher errors sent, by kind and code: pusher:error frames (kind error, by code; refused client events among them), pusher:subscription_error frames (kind subscription, by HTTP status), HTTP API refusals (kind http, by status).",
  floodgate_pusher_connections_total: "Pusher connections opened and closed (event); open now = opened - closed.",
  floodgate_pusher_subscriptions_total:
    "Pusher subscriptions opened and closed (event), each one channel of one connection; open now = opened - closed.",
  floodgate_pusher_side_frames_dropped_total:
    "Side frames (presence member events, summaries of drops) a connection host let go for a Pusher subscription still joining, past the 64 it keeps for each (the oldest first).",
  floodgate_readers_skipped_total:
    "Messages skipped for single subscribers: over their own max_rate, or thinned for reading too slowly (each subscriber's skips counted).",
  floodgate_readers_thinned_total:
    "Subscribers whose stream was thinned, by reason: max_rate (they asked for it) or slow (their relay thinned them for reading too slowly).",
  floodgate_refusals_total:
    "Requests, Pusher connections and Pusher subscriptions refused, by reason: unauthenticated (401), permission_denied (403), each 429's bucket by name, each 503's by name (max_subscribers, anonymous_subscribers, publish_overflow, export_too_dense; unavailable: a backend that failed), host_full (a Pusher connection closed 4100 by a connection host already full, or a Pusher subscription refused 503 by a host serving its most channels); a Pusher event's copy that failed while others of its request were published counts as its own 503 would.",
  floodgate_relay_frames_shed_total:
    "Frames a channel let go on its lines to relays (one relay 1 MiB behind, or all lines past their byte cap together); each relay fetched them from history.",
  floodgate_subscriptions_closed_total:
    "Subscriptions Floodgate ended, by reason: history_gap (4009; Pusher 4200), internal (1011; a Pusher catch-up that failed), slow (4008; Pusher 4100 for slowness), expired (4001), revoked (4001); a Pusher connection's close counts each of its channels.",
};

/** `floodgate_readers_skipped_total`, as relays count it (docs/api.md, "Each reader's rate"). */
export const READERS_SKIPPED_SERIES = "floodgate_readers_skipped_total";
/** `floodgate_readers_thinned_total{reason}`. */
export function readersThinnedSeries(reason: "max_rate" | "slow"): string {
  return seriesKey("floodgate_readers_thinned_total", { reason });
}

/**
 * A connection host with no room (a Pusher connection closed 4100, a Pusher subscription's 503 past
 * its lanes): no HTTP 503 names it, so not an UnavailableReason.
 */
export const HOST_FULL_REASON = "host_full";

/** The reasons `floodgate_refusals_total` always shows (a 429 of another bucket adds its own). */
export const REFUSAL_REASONS = [
  "unauthenticated",
  "permission_denied",
  "publish",
  "subscribe",
  "token-issue",
  "read",
  "admin-auth",
  "subscriptions",
  "connections",
  HOST_FULL_REASON,
  ...UNAVAILABLE_REASONS,
] as const;

/**
 * The `floodgate_refusals_total` reason of a refusal with this status, or null when the status is not
 * a refusal: one mapping for the HTTP routes and the Pusher door. `named` is what the refusal said it
 * met where it was made: a 429's bucket, a 503's reason (src/wire/errors.ts `UNAVAILABLE_REASONS`; a
 * connection host's `host_full`; a 503 that names none, or a name that is not one, is `unavailable`).
 */
export function refusalReasonOf(status: number, named?: string): string | null {
  switch (status) {
    case 401:
      return "unauthenticated";
    case 403:
      return "permission_denied";
    case 429:
      return named ?? "rate_limited";
    case 503:
      return isUnavailableReason(named) || named === HOST_FULL_REASON ? named : "unavailable";
    default:
      return null;
  }
}

/** Why Floodgate ended a subscription (`floodgate_subscriptions_closed_total{reason}`). */
export const CLOSE_REASONS = ["history_gap", "internal", "slow", "expired", "revoked"] as const;
export type CloseReason = (typeof CLOSE_REASONS)[number];

/** The rate-limit buckets, each always present in a scrape (docs/api.md, Operator routes). */
export const RATE_LIMIT_BUCKETS = ["publish", "subscribe", "token-issue", "read", "admin-auth"] as const;

/** Builds a series key such as `floodgate_messages_total{result="delivered"}`. */
export function seriesKey(name: string, labels: Record<string, string> = {}): string {
  const parts = Object.entries(labels).map(([k, v]) => `${k}="${v.replace(/["\\\n]/g, "_")}"`);
  return parts.length ? `${name}{${parts.join(",")}}` : name;
}

/** Renders stored series as Prometheus text, with zero series for the always-present families. */
export function renderPrometheus(series: Record<string, number>): string {
  const all: Record<string, number> = {
    [seriesKey("floodgate_messages_total", { result: "delivered" })]: 0,
    [seriesKey("floodgate_messages_total", { result: "dropped" })]: 0,
    floodgate_record_copies_total: 0,
    floodgate_record_failures_total: 0,
    floodgate_record_queue_messages_total: 0,
    floodgate_record_objects_written_total: 0,
    floodgate_record_expired_total: 0,
    floodgate_analytics_copy_failures_total: 0,
    floodgate_analytics_copies_unsettled_total: 0,
    floodgate_analytics_copies_total: 0,
    floodgate_analytics_expired_total: 0,
    [seriesKey("floodgate_object_calls_total", { object: "channel" })]: 0,
    [seriesKey("floodgate_object_calls_total", { object: "analytics" })]: 0,
    [seriesKey("floodgate_object_calls_total", { object: "limiter" })]: 0,
    floodgate_kv_reads_total: 0,
    floodgate_publish_overflow_total: 0,
    [READERS_SKIPPED_SERIES]: 0,
    [readersThinnedSeries("max_rate")]: 0,
    [readersThinnedSeries("slow")]: 0,
    floodgate_relay_frames_shed_total: 0,
    floodgate_pusher_side_frames_dropped_total: 0,
    ...series,
  };
  for (const bucket of RATE_LIMIT_BUCKETS) {
    for (const result of ["allowed", "denied"]) {
      const k = seriesKey("floodgate_rate_limit_decisions_total", { bucket, result });
      all[k] ??= 0;
    }
    all[seriesKey("floodgate_rate_limit_errors_total", { bucket })] ??= 0;
    all[seriesKey("floodgate_rate_limit_deny_cache_hits_total", { bucket })] ??= 0;
    all[seriesKey("floodgate_rate_limit_lease_hits_total", { bucket })] ??= 0;
  }
  for (const reason of REFUSAL_REASONS) all[seriesKey("floodgate_refusals_total", { reason })] ??= 0;
  for (const reason of CLOSE_REASONS) all[seriesKey("floodgate_subscriptions_closed_total", { reason })] ??= 0;
  const lines: string[] = [];
  for (const [name, help] of Object.entries(METRIC_HELP)) {
    lines.push(`# HELP ${name} ${help}`, `# TYPE ${name} counter`);
    const keys = Object.keys(all)
      .filter((k) => k === name || k.startsWith(`${name}{`))
      .sort();
    for (const k of keys) lines.push(`${k} ${all[k]}`);
  }
  return `${lines.join("\n")}\n`;
}
