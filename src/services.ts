/**
 * Per-isolate services built once from `env`: the parsed config, the drop-rate reader, the batch
 * queue for analytics copies, the limiter gate and the metrics buffer. Routes reach them through
 * the Hono context (`c.get("svc")`).
 */
import { DropRateReader } from "../functions/before-publish";
import { DropCopyQueue, type QueuedCopy, serialiseCopy } from "../functions/drop-copies";
import { Thinning } from "../functions/thinning";
import type { ChannelObject } from "./channel-object";
import { type Config, getConfig } from "./config";
import { LimiterGate } from "./limiter-gate";
import { MetricsBuffer } from "./metrics";
import { PublishBatcher } from "./publish-batcher";

export interface Services {
  config: Config;
  reader: DropRateReader;
  drops: DropCopyQueue;
  gate: LimiterGate;
  metrics: MetricsBuffer;
  /** Per-isolate error-diffusion state for channels in `THROTTLE_THINNING`. */
  thinning: Thinning;
  /** Coalesces concurrent publishes to one channel into one object call. */
  publisher: PublishBatcher;
}

/** The stub of a channel's object, for one call; counts the call in `floodgate_object_calls_total`. */
export function channelStub(env: Env, channel: string): DurableObjectStub<ChannelObject> {
  const svc = cache.get(env);
  if (svc) {
    const object = channel === svc.config.analyticsChannel.name ? "analytics" : "channel";
    svc.metrics.inc("floodgate_object_calls_total", { object });
  }
  return env.CHANNEL.get(objectId(env.CHANNEL, channel));
}

/**
 * `idFromName` hashes the name on every call; an id is a plain value, so it is kept per isolate
 * (stubs are not: they belong to the request that made them).
 */
const ids = new WeakMap<object, Map<string, DurableObjectId>>();
export function objectId(ns: { idFromName(name: string): DurableObjectId }, name: string): DurableObjectId {
  let m = ids.get(ns);
  if (!m) {
    m = new Map();
    ids.set(ns, m);
  }
  let id = m.get(name);
  if (!id) {
    if (m.size >= 10_000) m.clear();
    id = ns.idFromName(name);
    m.set(name, id);
  }
  return id;
}

const METRICS_OBJECT = "metrics";

const cache = new WeakMap<object, Services>();

/**
 * The services for this env (one set per isolate). @throws ConfigError when the config is invalid.
 */
export function services(env: Env): Services {
  let s = cache.get(env);
  if (s) return s;
  const config = getConfig(env);
  const metrics = new MetricsBuffer(
    () => env.METRICS.get(env.METRICS.idFromName(METRICS_OBJECT)),
    config.metricsFlushMs,
  );
  const reader = new DropRateReader({
    store: {
      get: (key) => {
        metrics.inc("floodgate_kv_reads_total");
        return env.THROTTLE_KV.get(key);
      },
    },
    fallbackRate: config.throttleFallbackRate,
    cacheMs: config.rateCacheMs,
  });
  const svc: Services = {
    config,
    metrics,
    thinning: new Thinning(),
    publisher: new PublishBatcher(async (channel, cmds) => {
      const { outcomes, drop_rate } = await channelStub(env, channel).publishMany(cmds);
      // The channel's fast-loop rate reaches this isolate with every answer, without waiting on KV.
      reader.offer(channel, drop_rate);
      return outcomes;
    }),
    reader,
    drops: new DropCopyQueue({
      sink: { send: (batch) => sendCopies(env, config, reader, batch) },
      onFailure: (batch, error) => {
        console.error(
          `floodgate analytics: ${batch.length} dropped-message copies did not reach ${config.analyticsChannel.name}`,
          error instanceof Error ? error.message : error,
        );
        metrics.inc("floodgate_analytics_copy_failures_total", {}, batch.length);
        // The messages stay dropped; their drops and the failed copies are still counted. Returned so
        // the queue awaits it inside the request's waitUntil instead of leaving it floating.
        return countDrops(env, reader, batch, true);
      },
    }),
    gate: new LimiterGate(
      {
        charge: (key, limit, count, lease) => {
          metrics.inc("floodgate_object_calls_total", { object: "limiter" });
          return env.RATE_LIMITER.get(objectId(env.RATE_LIMITER, key)).chargeMany(limit, count, undefined, lease);
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
    ),
  };
  s = svc;
  cache.set(env, s);
  return s;
}

/**
 * One call to the analytics channel per batch and, alongside it rather than after it, one drop count
 * per source channel: a channel's fast loop measures its offered rate from these counts, so they do
 * not wait on the analytics channel (nor fail with it).
 */
async function sendCopies(env: Env, config: Config, reader: DropRateReader, batch: QueuedCopy[]): Promise<void> {
  const now = Date.now();
  // Settled both ways before a failed copy is reported, so the failure report sees what was counted.
  const [copied] = await Promise.allSettled([
    channelStub(env, config.analyticsChannel.name).publishBatch(
      config.analyticsChannel.name,
      batch.map((q) => ({ data: serialiseCopy(q), publisher: q.copy.publisher })),
      now,
    ),
    countDrops(env, reader, batch, false),
  ]);
  if (copied.status === "rejected") throw copied.reason;
}

/**
 * Tells each source channel how many drops it had (those not counted by the channel already), and
 * marks them counted, so a copy failure reported afterwards counts only the failure. Each channel
 * answers its fast-loop rate: at a high drop rate this is how most isolates hear it.
 */
async function countDrops(env: Env, reader: DropRateReader, batch: QueuedCopy[], failed: boolean): Promise<void> {
  const perChannel = new Map<string, { dropped: number; failed: number }>();
  for (const q of batch) {
    const e = perChannel.get(q.copy.source_channel) ?? { dropped: 0, failed: 0 };
    if (!q.counted) e.dropped++;
    if (failed) e.failed++;
    perChannel.set(q.copy.source_channel, e);
  }
  await Promise.all(
    [...perChannel].map(async ([channel, n]) => {
      if (n.dropped === 0 && n.failed === 0) return;
      try {
        reader.offer(channel, await channelStub(env, channel).recordDrops(channel, n.dropped, n.failed));
        for (const q of batch) if (q.copy.source_channel === channel) q.counted = true;
      } catch (e) {
        console.error(
          `floodgate: could not count ${n.dropped} drops on ${channel}`,
          e instanceof Error ? e.message : e,
        );
      }
    }),
  );
}
