/**
 * A broadcast (docs/api.md, "Shards"): one message delivered into every shard of a channel that has
 * subscribers or history, each shard giving it its own seq. The channel's registry names the shards
 * (src/channel/shard-registry.ts); a shard found empty answers `absent`, creates nothing and leaves
 * the registry. A broadcast is never dropped by the throttle: it is the operator's voice to all.
 */
import { shardKey } from "../../../functions/shard-key";
import type { PublishCommand } from "../../channel/calls";
import { channelStub } from "../../platform/stubs";
import { countedChannelStub } from "../services";

/** One shard's delivery of a broadcast. */
export interface ShardDelivery {
  shard: string;
  seq: number;
  id: string;
}

/**
 * Delivers `cmd` into every live shard of `channel`, in parallel; answers the deliveries in shard-name
 * order. A shard whose call fails makes the whole broadcast fail (the caller answers 503; with an
 * `Idempotency-Key` a retry delivers nothing twice).
 */
export async function broadcastToShards(
  env: Env,
  channel: string,
  cmd: Omit<PublishCommand, "channel" | "action">,
): Promise<ShardDelivery[]> {
  const registry = channelStub(env, channel);
  const names = await registry.shardNames();
  const answers = await Promise.all(
    names.map(async (shard) => {
      const key = shardKey(channel, shard);
      const outcome = await countedChannelStub(env, key).broadcastOne({ ...cmd, channel: key, action: "deliver" });
      return { shard, outcome };
    }),
  );
  const absent = answers.filter((a) => a.outcome.status === "absent").map((a) => a.shard);
  if (absent.length > 0) await registry.forgetShards(absent);
  const delivered: ShardDelivery[] = [];
  for (const { shard, outcome } of answers) {
    if (outcome.status === "delivered") delivered.push({ shard, seq: outcome.seq, id: outcome.id });
  }
  return delivered;
}
