/**
 * One sampler run (docs/throttling.md): the Cron Trigger and `POST /v1/admin/sample` both call
 * {@link runSampler}. Platform glue: it reads, calls and writes; what a visit decides (which rate wins,
 * whether KV is written, whether a channel fits the run or stays throttled) is the pure
 * functions/sampler-visit.ts, on the law in functions/sampler.ts.
 *
 * 1. Ask the registry (ActiveChannels) which channels saw traffic since the last run or are still
 *    throttled — never a listing of every channel, and at most `SAMPLER_MAX_CHANNELS` of them,
 *    busiest first; the rest keep their marks for the next run.
 * 2. For each channel with a target (never the analytics channel): take its period counts from its
 *    Durable Object, compute the new rate, write `throttleRate:<channel>` only when the rate it
 *    runs at changes meaningfully, and record the sample on the channel so stats and the admin API
 *    show it. A run never spends more than the platform's KV operations per invocation
 *    (`KV_OPERATIONS_PER_RUN`, functions/sampler-visit.ts); a channel that would not fit waits for the
 *    next run (docs/operations.md, "Sampler limits per run").
 *    A channel's own fast loop (src/channel/fast-loop.ts) decides with the same law every few seconds;
 *    when it has decided during the period, its rate is the one persisted, so the two never disagree.
 * 3. Tell the registry what was sampled (with each sample, for the dashboard's overview). A channel whose object or KV fails is reported with an
 *    error and keeps its mark for the next run; the others go on.
 */
import { GLOBAL_RATE_KEY, parseStoredRate, rateKey } from "../../../functions/before-publish";
import {
  decideVisit,
  globalRunningRate,
  KV_OPERATIONS_PER_SHARD_VISIT,
  KV_OPERATIONS_PER_VISIT,
  KvBudget,
  kvOperations,
  type SkipReason,
  shardDefaultRate,
  visitTarget,
} from "../../../functions/sampler-visit";
import { splitShardKey } from "../../../functions/shard-key";
import type { SeriesPoint } from "../../active-channels/series";
import { activeChannelsStub } from "../../platform/stubs";
import { isAnalytics, targetFor } from "../../settings/rules";
import type { Settings } from "../../settings/settings";
import { type TargetJson, targetJson } from "../../settings/targets";
import { channelOfKey } from "../../wire/channel-names";
import { countedChannelStub } from "../services";

/** What the sampler decided for one channel; stored as the channel's `last_sample`. */
export interface ChannelSample {
  channel: string;
  sampled_at: number;
  /** The target as configured: shorthand, or `{"deliveries": …}`. */
  target: TargetJson;
  offered: number;
  delivered: number;
  dropped: number;
  /** Priority messages among the delivered ones (docs/throttling.md, "Priority messages"). */
  priority: number;
  elapsed_ms: number;
  occupancy: number;
  /** Offered messages per second over the period. */
  offered_rate: number | null;
  /** Messages per second the target allows at this occupancy. */
  allowed_rate: number | null;
  old_rate: number | null;
  new_rate: number;
  /** Whether `new_rate` was written to KV (false when the change was too small to matter). */
  written: boolean;
  /** Whether the channel's key was deleted instead: `new_rate` is what it runs at without one. */
  deleted: boolean;
  /**
   * Who decided `new_rate`: the channel's fast loop (this run persisted it), or this sweep, by the same
   * law on its own period's counts (the fast loop had not decided during the period).
   */
  decided_by: "fast loop" | "sweep";
}

export interface SkippedChannel {
  channel: string;
  skipped: SkipReason;
}

export interface FailedChannel {
  channel: string;
  error: string;
}

export interface SamplerReport {
  ran_at: number;
  previous_run_at: number | null;
  channels: (ChannelSample | SkippedChannel | FailedChannel)[];
  /** Channels with marks left for a later run (SAMPLER_MAX_CHANNELS, KV operations per run). */
  deferred: number;
}

/** How many channels are visited at once. */
const CONCURRENCY = 8;

/** This isolate's drop-rate cache: a rate the sampler writes takes effect here at once. */
export interface RateCache {
  invalidate(channel: string): void;
}

export async function runSampler(
  env: Env,
  config: Settings,
  now: number = Date.now(),
  cache?: RateCache,
): Promise<SamplerReport> {
  const registry = activeChannelsStub(env);
  const start = await registry.beginRun(now, config.samplerMaxChannels);
  const runtimeTargets = start.targets;
  const results: SamplerReport["channels"] = [];
  const finished: {
    channel: string;
    generation: number;
    throttled: boolean;
    sample?: ChannelSample;
    points?: SeriesPoint[];
  }[] = [];
  const queue = [...start.channels];
  let deferred = start.deferred;
  const kv = new KvBudget();
  // The rate a channel without its own key runs at: one read for the whole run.
  const globalText = await env.THROTTLE_KV.get(GLOBAL_RATE_KEY);
  const globalRate = globalRunningRate(
    globalText === null ? null : parseStoredRate(globalText),
    config.throttleFallbackRate,
  );
  const defaults = new DefaultRates(env, globalRate);

  async function worker(): Promise<void> {
    for (let next = queue.shift(); next; next = queue.shift()) {
      const { channel, generation } = next;
      const reserved = isShardKey(channel) ? KV_OPERATIONS_PER_SHARD_VISIT : KV_OPERATIONS_PER_VISIT;
      if (!kv.reserveVisit(reserved)) {
        deferred++; // keeps its mark: the next run visits it
        continue;
      }
      try {
        // A shard (functions/shard-key.ts) holds its channel's runtime target unless it has its own.
        const runtime = runtimeTargets[channel] ?? runtimeTargets[splitShardKey(channel).channel];
        const visit = await sampleChannel(env, config, channel, now, runtime, defaults);
        kv.settle(reserved, kvOperations(visit.outcome) + visit.defaultReads);
        if ("written" in visit.outcome && (visit.outcome.written || visit.outcome.deleted)) cache?.invalidate(channel);
        results.push(visit.outcome);
        const sample = "new_rate" in visit.outcome ? visit.outcome : undefined;
        finished.push({ channel, generation, throttled: visit.throttled, sample, points: visit.points });
      } catch (e) {
        // One failing channel never stops the run; its mark stays, so the next run tries again.
        console.error(`floodgate sampler: ${channel} failed`, e instanceof Error ? e.message : e);
        results.push({ channel, error: "channel unavailable; retried next run" });
      }
    }
  }
  await Promise.all(Array.from({ length: Math.min(CONCURRENCY, queue.length) }, worker));
  await registry.finishRun(finished);
  results.sort((a, b) => a.channel.localeCompare(b.channel));
  return { ran_at: now, previous_run_at: start.previousRunAt, channels: results, deferred };
}

/** One visit: reads the channel's counts and key, and writes what functions/sampler-visit.ts decides. */
async function sampleChannel(
  env: Env,
  config: Settings,
  channel: string,
  now: number,
  runtimeTarget: unknown,
  defaults: DefaultRates,
): Promise<{
  outcome: ChannelSample | SkippedChannel;
  throttled: boolean;
  points?: SeriesPoint[];
  /** KV reads of the channel's key this shard's visit made (the run shares them). */
  defaultReads: number;
}> {
  const plan = visitTarget(isAnalytics(config, channel), targetFor(config, channelOfKey(channel), runtimeTarget));
  if ("skipped" in plan) return { outcome: { channel, skipped: plan.skipped }, throttled: false, defaultReads: 0 };
  const { target } = plan;
  const stub = countedChannelStub(env, channel);
  const [taken, storedText, { rate: defaultRate, read: defaultReads }] = await Promise.all([
    stub.takePeriod(now, targetJson(target)),
    env.THROTTLE_KV.get(rateKey(channel)),
    defaults.of(channel),
  ]);
  const stored = storedText === null ? null : parseStoredRate(storedText);
  const period = taken.counts;
  const decision = decideVisit({ target, period: taken, storedRate: stored, defaultRate });
  if (decision.write) await env.THROTTLE_KV.put(rateKey(channel), String(decision.newRate));
  if (decision.deleteKey) await env.THROTTLE_KV.delete(rateKey(channel));
  const sample: ChannelSample = {
    channel,
    sampled_at: now,
    target: targetJson(target),
    offered: period.delivered + period.dropped,
    delivered: period.delivered,
    dropped: period.dropped,
    priority: period.priority ?? 0,
    elapsed_ms: period.elapsedMs,
    occupancy: period.occupancy,
    offered_rate: decision.offeredRate,
    allowed_rate: decision.allowedRate,
    old_rate: stored,
    new_rate: decision.newRate,
    written: decision.write,
    deleted: decision.deleteKey,
    decided_by: decision.decidedBy,
  };
  await stub.recordSample(sample);
  // The dashboard's series: the fast loop's decisions during the period, then the sweep's own.
  const sweepPoint: SeriesPoint = {
    at: now,
    by: "sweep",
    elapsed_ms: period.elapsedMs,
    delivered: period.delivered,
    dropped: period.dropped,
    occupancy: period.occupancy,
    allowed_rate: decision.allowedRate,
    drop_rate: decision.newRate,
  };
  return {
    outcome: sample,
    throttled: decision.throttled,
    points: [...(taken.fastPoints ?? []), sweepPoint],
    defaultReads,
  };
}

/**
 * What a channel without its own key runs at during one run: the global rate; for a shard its
 * channel's key first (functions/before-publish.ts), read once per channel per run however many of
 * its shards are visited. `read` counts the read for the visit that made it (the run's KV budget).
 */
class DefaultRates {
  private readonly channels = new Map<string, Promise<number>>();

  constructor(
    private readonly env: Env,
    private readonly globalRate: number,
  ) {}

  async of(key: string): Promise<{ rate: number; read: number }> {
    if (!isShardKey(key)) return { rate: this.globalRate, read: 0 };
    const channel = splitShardKey(key).channel;
    const known = this.channels.get(channel);
    if (known) return { rate: await known, read: 0 };
    const rate = this.env.THROTTLE_KV.get(rateKey(channel)).then((text) =>
      shardDefaultRate(text === null ? null : parseStoredRate(text), this.globalRate),
    );
    this.channels.set(channel, rate);
    return { rate: await rate, read: 1 };
  }
}

function isShardKey(key: string): boolean {
  return splitShardKey(key).shard !== null;
}
