/**
 * A connection host's counts for `/metrics` (docs/operations.md, Metrics): Pusher errors sent by
 * code, connections and subscriptions opened and closed, the subscriptions it ended by reason.
 * Counted in memory and flushed to the metrics object (src/metrics/metrics-store.ts) at most once per
 * `METRICS_FLUSH_MS`, as a Worker isolate does.
 */
import { type CloseReason, refusalReasonOf, seriesKey } from "../metrics/series";
import { metricsStub } from "../platform/stubs";
import { settingsOf } from "../settings/settings";

export class HostMetrics {
  private pending = new Map<string, number>();
  private timer: ReturnType<typeof setTimeout> | null = null;

  constructor(private readonly env: Env) {}

  inc(name: string, labels: Record<string, string> = {}, n = 1): void {
    const key = seriesKey(name, labels);
    this.pending.set(key, (this.pending.get(key) ?? 0) + n);
    this.timer ??= setTimeout(() => this.flush(), settingsOf(this.env).metricsFlushMs);
  }

  /** A `pusher:error` (kind `error`) or `pusher:subscription_error` (kind `subscription`) sent. */
  error(kind: "error" | "subscription", code: number): void {
    this.inc("floodgate_pusher_errors_total", { kind, code: String(code) });
  }

  /**
   * A refused subscription, counted by reason like the HTTP routes' refusals
   * (`floodgate_refusals_total`): 401, 403, and a 429 or 503 by the bound it met (`named`: a 429's
   * bucket, a 503's reason; a 503 that names none is `unavailable`).
   */
  refusal(status: number, named?: string): void {
    const reason = refusalReasonOf(status, named);
    if (reason !== null) this.inc("floodgate_refusals_total", { reason });
  }

  /**
   * `n` Pusher subscriptions the host ended for `reason` (`floodgate_subscriptions_closed_total`), as
   * relays count their subscribers' (src/relay/closes.ts): one per channel of the connection it closed.
   */
  closed(reason: CloseReason, n: number): void {
    if (n > 0) this.inc("floodgate_subscriptions_closed_total", { reason }, n);
  }

  private flush(): void {
    this.timer = null;
    if (this.pending.size === 0) return;
    const deltas = Object.fromEntries(this.pending);
    this.pending = new Map();
    metricsStub(this.env)
      .add(deltas)
      .catch((e: unknown) => {
        console.error("floodgate host: could not flush metrics", e instanceof Error ? e.message : e);
        for (const [k, v] of Object.entries(deltas)) this.pending.set(k, (this.pending.get(k) ?? 0) + v);
        this.timer ??= setTimeout(() => this.flush(), Math.max(1000, settingsOf(this.env).metricsFlushMs) * 5);
      });
  }
}
