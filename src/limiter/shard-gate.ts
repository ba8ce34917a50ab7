/**
 * The limiter gate as Floodgate runs it, in the Worker (src/worker/services.ts) and in a connection
 * host (src/connection-host/host-reads.ts): it asks the limiter shards through their stubs and counts
 * what it does in /metrics the same way wherever it runs — each object call, each decision by bucket
 * and result, the deny-cache and lease hits, and each failure.
 */
import { limiterShardStub } from "../platform/stubs";
import { LimiterGate } from "./limiter-gate";
import { shardName } from "./limiter-shard";

/** Where the counts go: the Worker's metrics buffer or a host's. */
export interface GateCounter {
  inc(name: string, labels?: Record<string, string>, n?: number): void;
}

export function shardGate(env: Env, metrics: GateCounter): LimiterGate {
  return new LimiterGate(
    {
      charge: (shard, charges) => {
        metrics.inc("floodgate_object_calls_total", { object: "limiter" });
        return limiterShardStub(env, shardName(shard)).decide(charges);
      },
    },
    {
      decision: (bucket, allowed, source) => {
        metrics.inc("floodgate_rate_limit_decisions_total", { bucket, result: allowed ? "allowed" : "denied" });
        if (source === "deny_cache") metrics.inc("floodgate_rate_limit_deny_cache_hits_total", { bucket });
        if (source === "lease") metrics.inc("floodgate_rate_limit_lease_hits_total", { bucket });
      },
      error: (bucket) => metrics.inc("floodgate_rate_limit_errors_total", { bucket }),
    },
  );
}
