/**
 * `Floodgate-Shard` on a publish (docs/api.md, "Shards"): `*` broadcasts into every shard of a
 * sharded channel that has subscribers or history; `<name>` publishes into that one shard. Both need
 * the token's `broadcast` scope; without the header a publish goes to the publisher's own shard
 * (src/settings/shards.ts, `audienceOf`).
 */
import { shardKey } from "../../../functions/shard-key";
import { shardRuleFor } from "../../settings/rules";
import type { Settings } from "../../settings/settings";
import { isShardName } from "../../settings/shards";
import type { ChannelName } from "../../wire/channel-names";
import { invalidArgument, permissionDenied } from "../../wire/errors";
import type { VerifiedToken } from "../auth/tokens";
import { type Audience, audienceOf } from "./audience";

export const SHARD_HEADER = "floodgate-shard";

/** Where one publish goes: one shard (or the unsharded channel), or every live shard. */
export type PublishAudience = { audience: Audience } | { broadcast: true };

/**
 * The publish's audience from its token, request and `Floodgate-Shard` header.
 * @throws ApiError 403 when the header comes without the `broadcast` scope; 400 when the channel is
 * not sharded or the name cannot be one of its shards
 */
export function publishAudience(
  config: Settings,
  channel: ChannelName,
  token: VerifiedToken,
  request: Request,
): PublishAudience {
  const header = request.headers.get(SHARD_HEADER);
  if (header === null) return { audience: audienceOf(config, channel, token.claims, request) };
  if (!token.claims.scp.includes("broadcast")) {
    throw permissionDenied('Floodgate-Shard needs a token with the "broadcast" scope');
  }
  const rule = shardRuleFor(config, channel);
  if (!rule) throw invalidArgument(`Floodgate-Shard: channel ${channel.name} is not sharded (AUDIENCE_SHARDS)`);
  const name = header.trim();
  if (name === "*") return { broadcast: true };
  if (!isShardName(rule.value, name)) {
    throw invalidArgument(
      rule.value.by === "group"
        ? 'Floodgate-Shard must be "*", "default" or a group: 1-32 characters of a-z 0-9 _ -'
        : 'Floodgate-Shard must be "*", "default" or a continent code (AF, AN, AS, EU, NA, OC, SA)',
    );
  }
  return { audience: { shard: name, key: shardKey(channel.name, name) } };
}
