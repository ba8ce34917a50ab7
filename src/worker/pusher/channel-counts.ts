/**
 * A Pusher channel's counts as the HTTP API answers them (docs/api.md, "The Pusher door"):
 * `occupied`, `subscription_count`, `user_count` and `/users` of the whole channel, whichever shard
 * the caller's own request would belong to. A Pusher server library asks about the channel as a
 * whole (the app's server sits in one region while its users are everywhere), so on a channel that a
 * continent rule shards, the answer adds up every shard the channel's registry lists, found as the
 * stats route finds them (src/worker/shards/shard-view.ts), and the channel's own object (subscribers
 * who joined before the rule and have not reconnected since), merged by functions/shard-counts.ts.
 *
 * Bounded: a `pusher:` channel can be sharded by continent only (a group rule cannot match one), so
 * its registry lists at most 8 shards — the 7 continents and `default` — and never more than
 * `MAX_SHARDS_PER_CHANNEL` whatever it holds. One call reads the list (beside the channel's own
 * counts), then one call per shard, all at once: at most 10 calls per channel, each answering at most
 * {@link MEMBER_IDS_COMPARED} ids. A channel no rule shards costs one call, as it always did.
 */
import { type MergedCounts, mergeShardCounts } from "../../../functions/shard-counts";
import { shardKey } from "../../../functions/shard-key";
import { shardRuleFor } from "../../settings/rules";
import type { Settings } from "../../settings/settings";
import type { ChannelName } from "../../wire/channel-names";
import { isPresence, pusherName } from "../../wire/pusher/names";
import { orUnavailable } from "../http/errors";
import { countedChannelStub } from "../services";
import { shardNames } from "../shards/shard-view";

/**
 * Most member ids each shard of a sharded presence channel lists for `user_count`, so that a user
 * present in two shards counts once: exact while every shard has at most this many members (a
 * Pusher presence channel has at most 100); past it, members not listed are added up uncompared.
 */
export const MEMBER_IDS_COMPARED = 1000;

/**
 * The whole channel's counts. `members`: the answer needs `user_count` (on a sharded presence
 * channel its shards then list their ids to compare); `users`: how many member ids it shows.
 * @throws ApiError 503 when the channel or a shard cannot be reached
 */
export async function pusherChannelCounts(
  env: Env,
  config: Settings,
  channel: ChannelName,
  want: { members: boolean; users: number },
): Promise<MergedCounts> {
  const presence = isPresence(pusherName(channel.name) ?? "");
  const sharded = shardRuleFor(config, channel) !== null;
  const ids = !presence ? 0 : sharded && want.members ? Math.max(MEMBER_IDS_COMPARED, want.users) : want.users;
  const countsOf = (key: string) => orUnavailable("channel", () => countedChannelStub(env, key).pusherCounts(ids));
  const [shards, own] = await Promise.all([shardNames(env, config, channel), countsOf(channel.name)]);
  const parts = await Promise.all(shards.map((shard) => countsOf(shardKey(channel.name, shard))));
  return mergeShardCounts([own, ...parts], want.users);
}
