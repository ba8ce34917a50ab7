/**
 * Audience shards (docs/api.md, "Shards"): which shard of a channel a request belongs to.
 *
 * A channel matching an `AUDIENCE_SHARDS` rule (most specific wins, as for every rule) is several
 * audiences behind one name, split by a grouping that already exists: the token's group
 * (`{"by":"group"}`, claim `grp`) or the request's continent (`{"by":"continent"}`,
 * `request.cf.continent`). Each shard is a channel of its own, with its own object found by
 * functions/shard-key.ts's key, so seq, history, resume, relays, drop rate and sampler target are all
 * per shard without any of that machinery knowing shards exist.
 *
 * {@link audienceOf} is the one place the choice is made: publish, subscribe, history and presence
 * call it and use the key it answers wherever they would have used the channel's name.
 */
import { shardKey, splitShardKey } from "../../functions/shard-key";
import { type ChannelName, parseChannelName, type Rule, selectRule } from "../wire/channel-names";
import type { Config } from "./settings";

/** One `AUDIENCE_SHARDS` rule's value. */
export interface ShardRule {
  readonly by: "group" | "continent";
}

/** The shard of a request that has no group (no token, or a token without one) or no continent. */
export const DEFAULT_SHARD = "default";

/** A token's group, and so a group shard's name: 1–32 characters of `[a-z0-9_-]`. */
export const GROUP_NAME = /^[a-z0-9_-]{1,32}$/;
export const GROUP_RULE = "group must be 1-32 characters of a-z 0-9 _ -";

/** The continent codes Cloudflare sets in `request.cf.continent`: each one a continent shard's name. */
export const CONTINENTS: readonly string[] = ["AF", "AN", "AS", "EU", "NA", "OC", "SA"];

/**
 * Most shards one channel keeps in its registry (what a broadcast and the stats walk). Continents
 * give at most 8; groups come only from tokens the admin mints. A new shard past it answers 503.
 */
export const MAX_SHARDS_PER_CHANNEL = 64;

/** Parses one rule's value: exactly `{"by":"group"}` or `{"by":"continent"}`. @throws Error naming what is wrong */
export function parseShardRule(value: unknown): ShardRule {
  if (value !== null && typeof value === "object" && !Array.isArray(value)) {
    const o = value as Record<string, unknown>;
    const keys = Object.keys(o);
    if (keys.length === 1 && keys[0] === "by" && (o.by === "group" || o.by === "continent")) return { by: o.by };
  }
  throw new Error('a shard rule must be {"by":"group"} or {"by":"continent"}');
}

/** The rule that shards `channel`, or undefined. The analytics channel is never sharded. */
export function shardRuleFor(config: Config, channel: ChannelName): Rule<ShardRule> | undefined {
  if (channel.name === config.analyticsChannel.name) return undefined;
  return selectRule(config.audienceShards, channel);
}

/** Where a request's messages go and come from. */
export interface Audience {
  /** The shard's name; null on a channel no rule shards (then `key` is the channel's name). */
  readonly shard: string | null;
  /** The name of the channel object that backs the shard (functions/shard-key.ts). */
  readonly key: string;
}

/** The request's continent code as Cloudflare gives it, or null (locally, tests aside, there is none). */
function continentOf(request: Request | null | undefined): string | null {
  const c = (request as { cf?: { continent?: unknown } } | null | undefined)?.cf?.continent;
  return typeof c === "string" && CONTINENTS.includes(c) ? c : null;
}

/**
 * The shard a request belongs to on `channel`: the token's group (`grp`) under a `{"by":"group"}`
 * rule, the request's continent under `{"by":"continent"}`, else {@link DEFAULT_SHARD}; on a
 * channel no rule shards, `{shard: null, key: channel.name}`. Pure apart from reading the request's
 * `cf`: no object is called, so it costs a publish nothing measurable.
 */
export function audienceOf(
  config: Config,
  channel: ChannelName,
  claims: { grp?: string } | null | undefined,
  request: Request | null | undefined,
): Audience {
  const rule = shardRuleFor(config, channel);
  if (!rule) return { shard: null, key: channel.name };
  const shard =
    rule.value.by === "group"
      ? claims?.grp && GROUP_NAME.test(claims.grp)
        ? claims.grp
        : DEFAULT_SHARD
      : (continentOf(request) ?? DEFAULT_SHARD);
  return { shard, key: shardKey(channel.name, shard) };
}

/** Whether `name` can be a shard of a channel sharded by `rule` (a `Floodgate-Shard` header, `?shard=`). */
export function isShardName(rule: ShardRule, name: string): boolean {
  if (name === DEFAULT_SHARD) return true;
  return rule.by === "group" ? GROUP_NAME.test(name) : CONTINENTS.includes(name);
}

/** The audience of a named shard; null when `name` cannot be one of this rule's shards. */
export function namedAudience(channel: ChannelName, rule: ShardRule, name: string): Audience | null {
  return isShardName(rule, name) ? { shard: name, key: shardKey(channel.name, name) } : null;
}

/** The channel name a channel object's key stands for, parsed (a shard's key names its channel). */
export function channelOfKey(key: string): ChannelName {
  return parseChannelName(splitShardKey(key).channel);
}
