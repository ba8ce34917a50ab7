/**
 * A sharded channel as the operator routes show it (docs/api.md, "Shards"): each shard's counts and
 * drop rate from its own object, and the channel's totals over them. The shards are those the
 * channel's registry lists (src/channel/shard-registry.ts).
 */
import * as z from "zod";
import { shardKey } from "../../../functions/shard-key";
import type { ChannelStats } from "../../channel/calls";
import { channelStub } from "../../platform/stubs";
import { shardRuleFor } from "../../settings/rules";
import type { Settings } from "../../settings/settings";
import type { ShardRule } from "../../settings/shards";
import type { ChannelName } from "../../wire/channel-names";
import { orUnavailable } from "../http/errors";
import { channelStats } from "../routes/channel-view";
import type { Services } from "../services";

/** One shard in a sharded channel's stats. */
export interface ShardStats {
  occupancy: number;
  delivered_total: number;
  dropped_total: number;
  drop_rate: number;
  last_seq: number;
}

export const ShardStatsSchema = z
  .object({
    occupancy: z.number().int(),
    delivered_total: z.number().int(),
    dropped_total: z.number().int(),
    drop_rate: z.number().min(0).max(1),
    last_seq: z.number().int().openapi({ description: "The shard's own seq." }),
  })
  .openapi("ShardStats");

/** The shards a channel's registry lists, by name (none for a channel no rule shards). */
export async function shardNames(env: Env, config: Settings, channel: ChannelName): Promise<string[]> {
  if (!shardRuleFor(config, channel)) return [];
  return orUnavailable("channel", () => channelStub(env, channel.name).shardNames());
}

/** The rule that shards a channel, as the manifest lists it; null when none does. */
export function shardRuleView(config: Settings, channel: ChannelName): { pattern: string; by: ShardRule["by"] } | null {
  const rule = shardRuleFor(config, channel);
  return rule ? { pattern: rule.pattern.source, by: rule.value.by } : null;
}

/** Every listed shard's stats and drop rate, and the raw stats to total. */
export async function shardsStats(
  env: Env,
  svc: Services,
  channel: ChannelName,
): Promise<{ shards: Record<string, ShardStats>; raw: ChannelStats[] }> {
  const names = await shardNames(env, svc.config, channel);
  const each = await Promise.all(
    names.map(async (name) => {
      const key = shardKey(channel.name, name);
      const [stats, rate] = await Promise.all([channelStats(env, key), svc.reader.rateFor(key)]);
      return { name, stats, rate: rate.rate };
    }),
  );
  // Defined, never assigned: a group may be named `__proto__`, which assignment would swallow.
  const shards: Record<string, ShardStats> = Object.fromEntries(
    each.map(({ name, stats, rate }) => [
      name,
      {
        occupancy: stats.occupancy,
        delivered_total: stats.delivered_total,
        dropped_total: stats.dropped_total,
        drop_rate: rate,
        last_seq: stats.last_seq,
      },
    ]),
  );
  return { shards, raw: each.map((e) => e.stats) };
}

/** The counts of a channel's own object plus every shard's: what "the totals" of a sharded channel are. */
export function totalled<K extends keyof ChannelStats>(own: ChannelStats, shards: ChannelStats[], keys: readonly K[]) {
  const out = {} as Record<K, number>;
  for (const k of keys) out[k] = [own, ...shards].reduce<number>((n, s) => n + Number(s[k] ?? 0), 0);
  return out;
}
