/**
 * Prometheus metrics (docs/operations.md, Metrics) without a Durable Object call per request.
 *
 * Each isolate counts into a {@link MetricsBuffer}; the buffer is flushed to the single
 * {@link MetricsStore} object at most about once a second (from `waitUntil`), and `/metrics` flushes
 * its own isolate's buffer before reading, so a scrape sees every decision made before it in a
 * single-isolate local run. Counts are exact once every isolate has flushed.
 */
import { DurableObject } from "cloudflare:workers";

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
    "Copies of dropped messages not recorded: refused by the drops queue, too large for a queue message, or given up after the queue's retries.",
  floodgate_record_queue_messages_total:
    "Messages sent to the drops queue (DROPS_QUEUE), each carrying many copies of dropped messages.",
  floodgate_record_objects_written_total:
    "Objects written to the record (RECORD_BUCKET) by the drops queue's consumer, redeliveries included.",
  floodgate_record_expired_total: "Copies in record objects deleted by RECORD_RETENTION (the Cron sweep).",
  floodgate_analytics_copy_failures_total:
    "Copies of dropped messages that did not reach the analytics channel (the record's live view) after the queue's retries.",
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
};

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

/** The one object that holds the deployment's totals. */
export class MetricsStore extends DurableObject<Env> {
  constructor(ctx: DurableObjectState, env: Env) {
    super(ctx, env);
    ctx.storage.sql.exec("CREATE TABLE IF NOT EXISTS series (key TEXT PRIMARY KEY, value INTEGER NOT NULL)");
  }

  add(deltas: Record<string, number>): void {
    const sql = this.ctx.storage.sql;
    for (const [k, d] of Object.entries(deltas)) {
      sql.exec(
        "INSERT INTO series (key, value) VALUES (?, ?) ON CONFLICT(key) DO UPDATE SET value = value + excluded.value",
        k,
        d,
      );
    }
  }

  read(): Record<string, number> {
    const out: Record<string, number> = {};
    for (const r of this.ctx.storage.sql.exec<{ key: string; value: number }>("SELECT key, value FROM series")) {
      out[r.key] = r.value;
    }
    return out;
  }
}

/** Most series keys one isolate remembers ({@link MetricsBuffer.inc}). */
const MAX_SERIES_KEYS = 256;

/** Per-isolate counts waiting to be flushed. */
export class MetricsBuffer {
  private pending = new Map<string, number>();
  /**
   * Series keys already built, by name and label values: every publish counts a few series, and
   * building each key anew (entries, escaping, joins) was a visible share of a publish's CPU. Label
   * values come from fixed sets (results, buckets, objects); the bound only guards against a new one.
   */
  private keys = new Map<string, string>();
  private inFlight: Promise<void> | null = null;
  private lastFlush = 0;
  private readonly intervalMs: number;
  private readonly store: () => { add(d: Record<string, number>): Promise<void> | void };

  constructor(store: () => { add(d: Record<string, number>): Promise<void> | void }, intervalMs = 1000) {
    this.store = store;
    this.intervalMs = intervalMs;
  }

  /** Counts one event. Call {@link schedule} before the request ends so it gets flushed. */
  inc(name: string, labels: Record<string, string> = {}, n = 1): void {
    if (n === 0) return;
    let id = name;
    for (const label in labels) id += `\u0000${label}\u0000${labels[label]}`;
    let k = this.keys.get(id);
    if (k === undefined) {
      k = seriesKey(name, labels);
      if (this.keys.size < MAX_SERIES_KEYS) this.keys.set(id, k);
    }
    this.pending.set(k, (this.pending.get(k) ?? 0) + n);
  }

  /**
   * Makes sure pending counts are flushed within about `intervalMs`; `defer` is `ctx.waitUntil`.
   * At most one flush is in flight per isolate, so a busy isolate makes about one call a second.
   */
  schedule(defer: (p: Promise<unknown>) => void): void {
    if (this.pending.size === 0 || this.inFlight) return;
    const wait = Math.max(0, this.lastFlush + this.intervalMs - Date.now());
    this.inFlight = new Promise<void>((r) => setTimeout(r, wait)).then(() => this.flushNow());
    defer(this.inFlight);
  }

  /** Sends what is pending now. Never rejects; a failed flush puts the counts back. */
  async flushNow(): Promise<void> {
    const batch = Object.fromEntries(this.pending);
    this.pending = new Map();
    this.inFlight = null;
    this.lastFlush = Date.now();
    if (Object.keys(batch).length === 0) return;
    try {
      await this.store().add(batch);
    } catch (e) {
      console.error("floodgate metrics: flush failed, will retry", e instanceof Error ? e.message : e);
      for (const [k, v] of Object.entries(batch)) this.pending.set(k, (this.pending.get(k) ?? 0) + v);
    }
  }
}
