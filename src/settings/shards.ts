/**
 * Audience shards as configured (docs/api.md, "Shards"): an `AUDIENCE_SHARDS` rule's value and the
 * names a shard may have. Which shard a request belongs to is the Worker's choice
 * (src/worker/shards/audience.ts); a shard's own object is found by functions/shard-key.ts's key.
 */

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

/** Whether `name` can be a shard of a channel sharded by `rule` (a `Floodgate-Shard` header, `?shard=`). */
export function isShardName(rule: ShardRule, name: string): boolean {
  if (name === DEFAULT_SHARD) return true;
  return rule.by === "group" ? GROUP_NAME.test(name) : CONTINENTS.includes(name);
}
