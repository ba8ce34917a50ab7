/**
 * A broadcast (docs/api.md, "Shards"): one message delivered into every shard of a channel that has
 * subscribers or history, each shard giving it its own seq. The channel's registry names the shards
 * (src/channel/shard-registry.ts); a shard found empty answers `absent`, creates nothing and leaves
 * the registry. A broadcast is never dropped by the throttle: it is the operator's voice to all.
 */
import { shardKey } from "../../../functions/shard-key";
import type { PublishCommand } from "../../channel/calls";
import type { MetricsBuffer } from "../../metrics/metrics-buffer";
import { channelStub } from "../../platform/stubs";
import { countedChannelStub } from "../services";

/** One shard's delivery of a broadcast. */
export interface ShardDelivery {
  shard: string;
  seq: number;
  id: string;
  /** When the shard first took it: a repeat of its `Idempotency-Key` answers the first time again. */
  published_at: number;
  /** Delivered by an earlier publish with the same `Idempotency-Key`: nothing was delivered now. */
  replayed: boolean;
}

/**
 * Delivers `cmd` into every live shard of `channel`, in parallel; answers the deliveries in shard-name
 * order. Counts in `floodgate_messages_total{result="delivered"}` each shard that took it now (not one
 * that replayed its `Idempotency-Key`), also when another shard failed: a shard whose call fails makes
 * the whole broadcast fail (the caller answers 503; with an `Idempotency-Key` a retry delivers nothing
 * twice, and counts only the shards that take it then).
 */
export async function broadcastToShards(
  env: Env,
  metrics: MetricsBuffer,
  channel: string,
  cmd: Omit<PublishCommand, "channel" | "action">,
): Promise<ShardDelivery[]> {
  const registry = channelStub(env, channel);
  const names = await registry.shardNames();
  const settled = await Promise.allSettled(
    names.map(async (shard) => {
      const key = shardKey(channel, shard);
      const outcome = await countedChannelStub(env, key).broadcastOne({ ...cmd, channel: key, action: "deliver" });
      return { shard, outcome };
    }),
  );
  const answers = settled.flatMap((s) => (s.status === "fulfilled" ? [s.value] : []));
  const delivered: ShardDelivery[] = [];
  for (const { shard, outcome } of answers) {
    if (outcome.status !== "delivered") continue;
    const { seq, id, published_at, replayed } = outcome;
    delivered.push({ shard, seq, id, published_at, replayed });
  }
  metrics.inc("floodgate_messages_total", { result: "delivered" }, delivered.filter((d) => !d.replayed).length);
  const failed = settled.find((s) => s.status === "rejected");
  if (failed) throw failed.reason;
  const absent = answers.filter((a) => a.outcome.status === "absent").map((a) => a.shard);
  if (absent.length > 0) await registry.forgetShards(absent);
  return delivered;
}
