/**
 * The read budget of a connection's client (docs/api.md, "Bounds": reads are budgeted). A
 * `pusher:subscribe` with no signature that verifies — a public channel, or a private or presence
 * one whose `auth` is missing or wrong — is the Pusher door's subscribe with no token, or with one
 * that fails verification, so it takes one token from `read:<ip>`: the bucket the connect was charged
 * to, in the limiter shards (src/limiter/limiter-shard.ts), shared with the client's native subscribes,
 * history reads and other connections. The connection's own subscribe budget (./subscriptions.ts)
 * still bounds its churn; this one bounds what a client IP reads over all its connections.
 *
 * Charged through a limiter gate of the host's own, counted as the Worker's (src/limiter/shard-gate.ts):
 * subscribes that arrive together, as pusher-js sends a page's channels on connect, share one call to
 * their shard, which still decides each of them strictly. A limiter that fails answers `failed`: the
 * subscribe is refused (fail closed).
 */
import { ipOf } from "../channel/client-cap";
import { readBudget } from "../limiter/budgets";
import type { LimiterGate } from "../limiter/limiter-gate";
import { shardGate } from "../limiter/shard-gate";
import type { Settings } from "../settings/settings";
import type { HostMetrics } from "./host-metrics";

/** What charging a subscribe to its client's read budget answered. */
export type ReadCharge = "allowed" | "denied" | "failed";

export class HostReads {
  private readonly gate: LimiterGate;

  constructor(env: Env, metrics: HostMetrics) {
    this.gate = shardGate(env, metrics);
  }

  /** Takes one token from `read:<ip>` of `client` (a connection's `ip:` key; `read:unknown` without an IP). */
  async take(settings: Settings, client: string): Promise<ReadCharge> {
    const budget = readBudget(settings, ipOf(client));
    try {
      const charged = await this.gate.charge("read", budget.key, budget.limit);
      return charged.denial ? "denied" : "allowed";
    } catch {
      // Logged and counted by the gate (floodgate_rate_limit_errors_total{bucket="read"}).
      return "failed";
    }
  }
}
