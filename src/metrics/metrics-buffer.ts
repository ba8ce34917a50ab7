/**
 * An isolate's metric counts waiting to be flushed to the metrics object (./metrics-store.ts), so
 * nothing makes a Durable Object call to count: a busy isolate flushes about once a second. The
 * Worker keeps one (src/worker/services.ts), and so does each isolate of objects (./object-metrics.ts).
 */
import { seriesKey } from "./series";

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
