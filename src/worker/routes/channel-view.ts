/**
 * One view of a channel for the operator routes (docs/api.md, Operator routes): its object's stats,
 * the drop rate its publishes get, its target and what that target lets through now. The stats route
 * and the channel list both answer from {@link channelView}, so they cannot disagree.
 */
import * as z from "zod";
import { allowedMessageRate } from "../../../functions/sampler";
import type { ChannelStats } from "../../channel/calls";
import { activeChannelsStub } from "../../platform/stubs";
import { isAnalytics, targetFor, thinningFor } from "../../settings/rules";
import type { Settings } from "../../settings/settings";
import { type Target, type TargetJson, targetJson } from "../../settings/targets";
import type { ChannelName } from "../../wire/channel-names";
import { orUnavailable } from "../http/errors";
import { TargetSchema } from "../http/openapi";
import { countedChannelStub, type Services } from "../services";

/**
 * Messages per second the target lets through now: a delivery budget is split across the current
 * subscribers. Null with no target, or a delivery budget and nobody subscribed (no limit).
 */
export function targetRate(t: Target | null, occupancy: number): number | null {
  if (!t) return null;
  const rate = allowedMessageRate(t, occupancy);
  return Number.isFinite(rate) ? rate : null;
}

/** The targets set at runtime (admin API), by channel name. */
export function runtimeTargets(env: Env): Promise<Record<string, TargetJson>> {
  return orUnavailable("sampler registry", () => activeChannelsStub(env).targets());
}

/** The channel's target: one set at runtime (admin API) wins over THROTTLE_TARGET(S). */
export async function targetOf(env: Env, config: Settings, channel: ChannelName): Promise<Target | null> {
  return targetFor(config, channel, (await runtimeTargets(env))[channel.name]);
}

/** The channel object's own counts. @throws ApiError 503 */
export function channelStats(env: Env, channel: string): Promise<ChannelStats> {
  return orUnavailable("channel", () => countedChannelStub(env, channel).stats());
}

/**
 * The view, with the object's full stats beside it for routes that show more. `target` is looked up
 * by the caller (the list reads every runtime target once, not once per channel).
 */
export async function channelView(
  env: Env,
  svc: Services,
  channel: ChannelName,
  target: Promise<Target | null>,
  /** The object to read: the channel's own, or one of its shards' (functions/shard-key.ts). */
  key = channel.name,
) {
  const [stats, rate, t] = await Promise.all([channelStats(env, key), svc.reader.rateFor(key), target]);
  const analytics = isAnalytics(svc.config, channel);
  const view = {
    channel: channel.name,
    occupancy: stats.occupancy,
    delivered_total: stats.delivered_total,
    dropped_total: stats.dropped_total,
    // The analytics channel is never throttled (docs/api.md, POST /v1/publish), whatever KV holds for it.
    drop_rate: analytics ? 0 : rate.rate,
    drop_rate_source: rate.source,
    drop_mode: thinningFor(svc.config, channel) ? ("thinning" as const) : ("random" as const),
    target: targetJson(t),
    target_rate: targetRate(t, stats.occupancy),
    last_sample: stats.last_sample,
  };
  return { view, stats, analytics };
}

/** {@link channelView}'s `view` in the OpenAPI document. */
export const ChannelViewSchema = z
  .object({
    channel: z.string(),
    occupancy: z.number().int(),
    delivered_total: z.number().int(),
    dropped_total: z.number().int(),
    drop_rate: z.number().min(0).max(1),
    drop_rate_source: z.enum(["channel", "global", "fallback", "fast-loop"]),
    drop_mode: z.enum(["random", "thinning"]),
    target: TargetSchema.nullable(),
    target_rate: z.number().nullable().openapi({ description: "Messages per second the target allows now." }),
    last_sample: z.unknown().openapi({ description: "The sampler's latest entry for the channel, or null." }),
  })
  .openapi("ChannelView");
