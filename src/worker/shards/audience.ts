/**
 * Which shard of a channel a request belongs to (docs/api.md, "Shards").
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
import { shardKey } from "../../../functions/shard-key";
import { shardRuleFor } from "../../settings/rules";
import type { Settings } from "../../settings/settings";
import { CONTINENTS, DEFAULT_SHARD, GROUP_NAME, isShardName, type ShardRule } from "../../settings/shards";
import type { ChannelName } from "../../wire/channel-names";

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
  settings: Settings,
  channel: ChannelName,
  claims: { grp?: string } | null | undefined,
  request: Request | null | undefined,
): Audience {
  const rule = shardRuleFor(settings, channel);
  if (!rule) return { shard: null, key: channel.name };
  const shard =
    rule.value.by === "group"
      ? claims?.grp && GROUP_NAME.test(claims.grp)
        ? claims.grp
        : DEFAULT_SHARD
      : (continentOf(request) ?? DEFAULT_SHARD);
  return { shard, key: shardKey(channel.name, shard) };
}

/** The audience of a named shard; null when `name` cannot be one of this rule's shards. */
export function namedAudience(channel: ChannelName, rule: ShardRule, name: string): Audience | null {
  return isShardName(rule, name) ? { shard: name, key: shardKey(channel.name, name) } : null;
}
