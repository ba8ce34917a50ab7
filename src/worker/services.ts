/**
 * Per-isolate services built once from `env`: the parsed config, the drop-rate reader, the batch
 * queue of copies of dropped messages (sent on to the drops queue), the limiter gate and the
 * metrics buffer. Routes reach them through the Hono context (`c.get("svc")`).
 */
import { DropRateReader } from "../../functions/before-publish";
import { CopyTally, copyKey, DropCopyQueue, OverflowLog, type QueuedCopy } from "../../functions/drop-copies";
import { Thinning } from "../../functions/thinning";
import type { ChannelObject } from "../channel/channel-object";
import type { LimiterGate } from "../limiter/limiter-gate";
import { shardGate } from "../limiter/shard-gate";
import { MetricsBuffer } from "../metrics/metrics-buffer";
import { channelStub, metricsStub } from "../platform/stubs";
import { isAnalytics } from "../settings/rules";
import { type Settings, settingsOf } from "../settings/settings";
import { sendToQueue } from "./drops/record-producer";
import { PublishBatcher } from "./publish-batcher";
import { ChannelReads } from "./reads/channel-reads";

export interface Services {
  config: Settings;
  reader: DropRateReader;
  drops: DropCopyQueue;
  gate: LimiterGate;
  metrics: MetricsBuffer;
  /** Per-isolate error-diffusion state for channels in `THROTTLE_THINNING`. */
  thinning: Thinning;
  /** Coalesces concurrent publishes to one channel into one object call. */
  publishBatcher: PublishBatcher;
  /** History and presence answers shared for up to a second (src/worker/reads/channel-reads.ts). */
  reads: ChannelReads;
}

/** The stub of a channel's object, for one call; counts the call in `floodgate_object_calls_total`. */
export function countedChannelStub(env: Env, channel: string): DurableObjectStub<ChannelObject> {
  const svc = cache.get(env);
  if (svc) {
    const object = isAnalytics(svc.config, channel) ? "analytics" : "channel";
    svc.metrics.inc("floodgate_object_calls_total", { object });
  }
  return channelStub(env, channel);
}

/**
 * The isolate's queue of copies of dropped messages holds at most `MAX_MESSAGE_BYTES` × this many bytes: 32 MiB
 * at the default 32 KiB, a quarter of the 128 MB an isolate may use — and counted at 2 bytes a
 * character (see functions/drop-copies.ts, copyBytes) where V8 keeps an ASCII or Latin-1 text in one,
 * so for most payloads half of that is really held. That is 512 copies of the largest native message
 * (256 of a Pusher event's stored body, up to twice its data): the
 * batch in flight, the ones filling behind it while the drops queue answers, with room to spare. At
 * 512 × (16 MiB) a 30 KB flood from 100 connections at 679 drops/s turned 9 of 6,792 copies away
 * while the local queue answered slowly (docs/benchmarks.md, "The record under a flood"); at 1,024
 * it kept every one. Only a stalled drops queue makes copies overflow.
 */
export const COPY_QUEUE_MESSAGE_BYTES = 1024;

/** Copies turned away by a full queue: logged at most once per 10 s per isolate, with their sources. */
const overflowLog = new OverflowLog((line) => console.error(line));

let cache = new WeakMap<object, Services>();

/**
 * Test hook: forgets the services of every env, so the next request builds them anew, with empty
 * drop-rate, deny, lease and thinning state. The tests write KV and object storage behind those
 * caches' backs (a global drop rate deleted straight from KV stays cached for THROTTLE_RATE_CACHE_MS),
 * so test/setup.ts calls this before every test; nothing in the Worker calls it.
 */
export function forgetServices(): void {
  cache = new WeakMap();
}

/**
 * The services for this env (one set per isolate). @throws ConfigError when the config is invalid.
 */
export function services(env: Env): Services {
  let s = cache.get(env);
  if (s) return s;
  const config = settingsOf(env);
  const metrics = new MetricsBuffer(() => metricsStub(env), config.metricsFlushMs);
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
    publishBatcher: new PublishBatcher(
      async (channel, cmds) => {
        const { outcomes, drop_rate } = await countedChannelStub(env, channel).publishMany(cmds);
        // The channel's fast-loop rate reaches this isolate with every answer, without waiting on KV.
        reader.offer(channel, drop_rate);
        return outcomes;
      },
      { onOverflow: () => metrics.inc("floodgate_publish_overflow_total") },
    ),
    reader,
    reads: new ChannelReads(config, (key) => countedChannelStub(env, key)),
    drops: new DropCopyQueue({
      sink: { send: (batch) => sendCopies(env, config, reader, metrics, batch) },
      maxBytes: config.maxMessageBytes * COPY_QUEUE_MESSAGE_BYTES,
      onFailure: (failed, cause, error) => {
        // Counted first, so the identities hold whatever happens next: dropped = recorded + record
        // failures, and (these copies never reach the analytics channel either) dropped = copies on
        // the analytics channel + its expired + analytics failures. Never reaching the queue, they
        // never reach its dead-letter consumer, the other place a copy fails: each is counted once.
        metrics.inc("floodgate_record_failures_total", {}, failed.total);
        metrics.inc("floodgate_analytics_copy_failures_total", {}, failed.total);
        if (cause === "queue full") overflowLog.note(failed);
        else
          console.error(
            `floodgate record: ${failed.total} dropped-message copies did not reach the drops queue (source channels: ${failed.describe()})`,
            error instanceof Error ? error.message : error,
          );
        // The messages stay dropped; their drops and the failed copies are still counted. Returned so
        // the queue awaits it inside the request's waitUntil instead of leaving it floating.
        return countDrops(env, reader, failed);
      },
      // Copies in a send that never settled (its request was cut off): counted apart from failures,
      // since each may still have reached the queue (docs/operations.md, "The record of dropped messages").
      onUnsettled: (copies) => metrics.inc("floodgate_analytics_copies_unsettled_total", {}, copies.total),
    }),
    gate: shardGate(env, metrics),
  };
  s = svc;
  cache.set(env, s);
  return s;
}

/**
 * One batch to the drops queue (src/worker/drops/record-producer.ts) and, alongside it rather than after it,
 * one drop count per source channel: a channel's fast loop measures its offered rate from these
 * counts, so they do not wait on the queue (nor fail with it). Answers the copies the queue refused.
 */
async function sendCopies(
  env: Env,
  config: Settings,
  reader: DropRateReader,
  metrics: MetricsBuffer,
  batch: QueuedCopy[],
): Promise<QueuedCopy[]> {
  // Settled both ways before a failed copy is reported, so the failure report sees what was counted.
  const [sent] = await Promise.allSettled([
    sendToQueue(env.DROPS_QUEUE, config.analyticsChannel.name, batch, (n) =>
      metrics.inc("floodgate_record_queue_messages_total", {}, n),
    ),
    countUncounted(env, reader, batch),
  ]);
  if (sent.status === "rejected") throw sent.reason;
  return sent.value;
}

/** Tells each source channel the drops of `batch` it has not counted, and marks them counted. */
async function countUncounted(env: Env, reader: DropRateReader, batch: QueuedCopy[]): Promise<void> {
  await Promise.all(
    [...CopyTally.of(batch).byChannel].map(async ([channel, e]) => {
      if (e.uncounted === 0 || !(await recordDrops(env, reader, channel, e.uncounted, 0, e.keys?.toObject()))) return;
      for (const q of batch) if (copyKey(q) === channel) q.counted = true;
    }),
  );
}

/** Tells each source channel how many drops it had (those it has not counted) and how many copies failed. */
async function countDrops(env: Env, reader: DropRateReader, failed: CopyTally): Promise<void> {
  await Promise.all(
    [...failed.byChannel].map(([channel, e]) =>
      recordDrops(env, reader, channel, e.uncounted, e.copies, e.keys?.toObject()),
    ),
  );
}

/**
 * Counts drops and failed copies on their channel, with the drops' summary keys (`byKey`, when the
 * channel has a summary rule: they go with the counts, so a summary adds up to the drops); answers
 * whether it could. The channel answers its fast-loop rate: at a high drop rate this is how most
 * isolates hear it.
 */
async function recordDrops(
  env: Env,
  reader: DropRateReader,
  channel: string,
  dropped: number,
  copyFailures: number,
  byKey?: Record<string, number>,
): Promise<boolean> {
  try {
    const stub = countedChannelStub(env, channel);
    reader.offer(channel, await stub.recordDrops(channel, dropped, copyFailures, byKey));
    return true;
  } catch (e) {
    console.error(`floodgate: could not count ${dropped} drops on ${channel}`, e instanceof Error ? e.message : e);
    return false;
  }
}
