/**
 * What the settings say about one channel: its target, its summary and conflation rules, its shard
 * rule, whether it is thinned — and the one exception every rule shares: the analytics channel (the record of dropped
 * messages) is never throttled, summarised or sharded ({@link isAnalytics} is where that is known).
 */
import { anyPatternMatches, type ChannelName, type Rule, selectRule } from "../wire/channel-names";
import type { Settings, SummaryRule } from "./settings";
import type { ShardRule } from "./shards";
import { resolveTarget, type Target } from "./targets";

/** Whether `channel` (a name, or a shard's object key) is the analytics channel (`ANALYTICS_CHANNEL`). */
export function isAnalytics(settings: Settings, channel: string | ChannelName): boolean {
  return (typeof channel === "string" ? channel : channel.name) === settings.analyticsChannel.name;
}

/**
 * A channel's target (docs/throttling.md): the runtime target (set through the admin API) if one is
 * given and parses, else the most specific `THROTTLE_TARGETS` pattern, else `THROTTLE_TARGET`; the
 * analytics channel has none.
 */
export function targetFor(settings: Settings, channel: ChannelName, runtime?: unknown): Target | null {
  if (isAnalytics(settings, channel)) return null;
  return resolveTarget(channel, { rules: settings.throttleTargets, fallback: settings.throttleTarget, runtime });
}

/** The summary rule of a channel (`THROTTLE_SUMMARY`, most specific wins), or null: no summaries. */
export function summaryFor(settings: Settings, channel: ChannelName): SummaryRule | null {
  if (isAnalytics(settings, channel)) return null;
  return selectRule(settings.throttleSummary, channel)?.value ?? null;
}

/**
 * The conflation rule of a channel (`CONFLATE_KEYS`, most specific wins), or null: a subscriber with a
 * `max_rate` skips what finds no room instead of holding the latest per key.
 */
export function conflationFor(settings: Settings, channel: ChannelName): SummaryRule | null {
  if (isAnalytics(settings, channel)) return null;
  return selectRule(settings.conflateKeys, channel)?.value ?? null;
}

/** Whether a channel's drops use deterministic thinning (`THROTTLE_THINNING`). */
export function thinningFor(settings: Settings, channel: ChannelName): boolean {
  return anyPatternMatches(settings.throttleThinning, channel);
}

/** The rule that shards `channel` (`AUDIENCE_SHARDS`), or undefined. */
export function shardRuleFor(settings: Settings, channel: ChannelName): Rule<ShardRule> | undefined {
  if (isAnalytics(settings, channel)) return undefined;
  return selectRule(settings.audienceShards, channel);
}
