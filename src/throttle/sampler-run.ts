/**
 * One sampler run (docs/throttling.md): the Cron Trigger and `POST /v1/admin/sample` both call
 * {@link runSampler}. Platform glue around the pure law in functions/sampler.ts.
 *
 * 1. Ask the registry (ActiveChannels) which channels saw traffic since the last run or are still
 *    throttled — never a listing of every channel, and at most `SAMPLER_MAX_CHANNELS` of them,
 *    busiest first; the rest keep their marks for the next run.
 * 2. For each channel with a target (never the analytics channel): take its period counts from its
 *    Durable Object, compute the new rate, write `throttleRate:<channel>` only when the rate it
 *    runs at changes meaningfully, and record the sample on the channel so stats and the admin API
 *    show it. A run never spends more than the platform's KV operations per invocation
 *    ({@link KV_OPERATIONS_PER_RUN}); a channel that would not fit waits for the next run
 *    (docs/operations.md, "Sampler limits per run").
 *    A channel's own fast loop (src/throttle/channel-fast-loop.ts) decides with the same law every few seconds;
 *    when it has decided during the period, its rate is the one persisted, so the two never disagree.
 * 3. Tell the registry what was sampled (with each sample, for the dashboard's overview). A channel whose object or KV fails is reported with an
 *    error and keeps its mark for the next run; the others go on.
 */
import { GLOBAL_RATE_KEY, parseStoredRate, rateKey } from "../../functions/before-publish";
import { allowedMessageRate, isMeaningfulChange, nextDropRate, offeredRate, roundRate } from "../../functions/sampler";
import { type ChannelName, parseChannelName } from "../channel/names";
import { type Config, parseTarget, type Target, type TargetJson, targetFor, targetJson } from "../platform/config";
import { countedChannelStub } from "../platform/services";
import { activeChannelsStub } from "../platform/stubs";

/** What the sampler decided for one channel; stored as the channel's `last_sample`. */
export interface ChannelSample {
  channel: string;
  sampled_at: number;
  /** The target as configured: shorthand, or `{"deliveries": …}`. */
  target: TargetJson;
  offered: number;
  delivered: number;
  dropped: number;
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
  /**
   * Who decided `new_rate`: the channel's fast loop (this run persisted it), or this sweep, by the same
   * law on its own period's counts (the fast loop had not decided during the period).
   */
  decided_by: "fast loop" | "sweep";
}

export interface SkippedChannel {
  channel: string;
  skipped: "no target" | "analytics channel";
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
/** Workers KV operations one invocation may make (docs/operations.md, "Sampler limits per run"). */
export const KV_OPERATIONS_PER_RUN = 1000;
/** KV operations one channel's visit may take: a read of its key and perhaps a write. */
const KV_OPERATIONS_PER_CHANNEL = 2;

/** This isolate's drop-rate cache: a rate the sampler writes takes effect here at once. */
export interface RateCache {
  invalidate(channel: string): void;
}

export async function runSampler(
  env: Env,
  config: Config,
  now: number = Date.now(),
  cache?: RateCache,
): Promise<SamplerReport> {
  const registry = activeChannelsStub(env);
  const start = await registry.beginRun(now, config.samplerMaxChannels);
  const runtimeTargets = start.targets;
  const results: SamplerReport["channels"] = [];
  const finished: { channel: string; generation: number; throttled: boolean; sample?: ChannelSample }[] = [];
  const queue = [...start.channels];
  let deferred = start.deferred;
  // The rate a channel without its own key runs at: one read for the whole run.
  let kvLeft = KV_OPERATIONS_PER_RUN - 1;
  const globalText = await env.THROTTLE_KV.get(GLOBAL_RATE_KEY);
  const globalRate = (globalText === null ? null : parseStoredRate(globalText)) ?? config.throttleFallbackRate;

  async function worker(): Promise<void> {
    for (let next = queue.shift(); next; next = queue.shift()) {
      const { channel, generation } = next;
      if (kvLeft < KV_OPERATIONS_PER_CHANNEL) {
        deferred++; // keeps its mark: the next run visits it
        continue;
      }
      kvLeft -= KV_OPERATIONS_PER_CHANNEL;
      try {
        const outcome = await sampleChannel(env, config, channel, now, runtimeTargets[channel], globalRate);
        kvLeft += KV_OPERATIONS_PER_CHANNEL - kvOperations(outcome);
        if ("written" in outcome && outcome.written) cache?.invalidate(channel);
        results.push(outcome);
        const sample = "new_rate" in outcome ? outcome : undefined;
        finished.push({ channel, generation, throttled: (sample?.new_rate ?? 0) > 0, sample });
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

/** KV operations a visit made: none when skipped, a read, and a write when it wrote. */
function kvOperations(outcome: ChannelSample | SkippedChannel): number {
  return "written" in outcome ? (outcome.written ? 2 : 1) : 0;
}

async function sampleChannel(
  env: Env,
  config: Config,
  channel: string,
  now: number,
  runtimeTarget: unknown,
  globalRate: number,
): Promise<ChannelSample | SkippedChannel> {
  if (channel === config.analyticsChannel.name) return { channel, skipped: "analytics channel" };
  const target = effectiveTarget(config, parseChannelName(channel), runtimeTarget);
  if (!target) return { channel, skipped: "no target" };
  const stub = countedChannelStub(env, channel);
  const [taken, storedText] = await Promise.all([
    stub.takePeriod(now, targetJson(target)),
    env.THROTTLE_KV.get(rateKey(channel)),
  ]);
  const stored = storedText === null ? null : parseStoredRate(storedText);
  const period = taken.counts;
  // Without its own key the channel runs at the global rate (or the fallback).
  const current = stored ?? globalRate;
  // The fast loop's rate when it decided during this period (finer and fresher, same law); else the
  // law on this period's counts — a channel whose fast loop did not run, idle ones included.
  const fast = taken.fastRate !== null && (taken.fastDecidedAt ?? 0) > taken.startedAt;
  const next = fast ? roundRate(taken.fastRate ?? 0) : roundRate(nextDropRate(period, current, target));
  // Only a meaningful change of the rate the channel runs at is written (KV: one write per second per
  // key, each write billed, a run's operations capped). A new channel under its target that already
  // runs at 0 gets no key; one that the global rate would throttle gets its own 0, so the global rate
  // never throttles a channel under its target.
  const written = stored === null ? next !== globalRate : isMeaningfulChange(stored, next);
  if (written) await env.THROTTLE_KV.put(rateKey(channel), String(next));
  const sample: ChannelSample = {
    channel,
    sampled_at: now,
    target: targetJson(target),
    offered: period.delivered + period.dropped,
    delivered: period.delivered,
    dropped: period.dropped,
    elapsed_ms: period.elapsedMs,
    occupancy: period.occupancy,
    offered_rate: round3(offeredRate(period)),
    // Unlimited (a delivery budget with nobody subscribed) shows as null.
    allowed_rate: round3(allowedMessageRate(target, period.occupancy)),
    old_rate: stored,
    new_rate: written ? next : current,
    written,
    decided_by: fast ? "fast loop" : "sweep",
  };
  await stub.recordSample(sample);
  return sample;
}

function round3(n: number | null): number | null {
  return n === null || !Number.isFinite(n) ? null : Math.round(n * 1000) / 1000;
}

/**
 * A target set at runtime through the admin API (stored in the registry) wins over
 * `THROTTLE_TARGETS` / `THROTTLE_TARGET`. A stored value that no longer parses is ignored.
 */
export function effectiveTarget(config: Config, channel: ChannelName, runtimeTarget: unknown): Target | null {
  if (runtimeTarget !== undefined && runtimeTarget !== null) {
    try {
      const t = parseTarget(runtimeTarget);
      if (t) return t;
    } catch {
      // validated when set; fall through to the configuration
    }
  }
  return targetFor(config, channel);
}
