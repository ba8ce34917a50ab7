/**
 * A sharded channel's shards (docs/api.md, "Shards"): the registry the channel's own object keeps of
 * them, and each shard object's membership in it. A broadcast and the stats walk the registry to
 * find "every shard that has subscribers or history" without guessing names.
 *
 * Bounded: at most {@link MAX_SHARDS_PER_CHANNEL} names. A shard joins the first time it is used in
 * an object's life (a publish, a subscriber, a drop count) and again at most every
 * {@link SHARD_REFRESH_MS}; past the bound its use answers 503. A name outlives its shard at most
 * until a broadcast finds the shard empty (it is then forgotten) or until the shard deletes its
 * storage as idle and says so. The registry keeps its channel's object from expiring as idle while
 * shards are in it: `shards_seen_at` counts like a publish (src/channel/idle-expiry.ts), for
 * `HISTORY_TTL` + {@link SHARD_REFRESH_MS}, longer than any shard it lists keeps its history.
 */
import { splitShardKey } from "../../functions/shard-key";
import { channelStub } from "../platform/stubs";
import { MAX_SHARDS_PER_CHANNEL } from "../settings/shards";
import type { ChannelStore } from "./store";

/** How often a live shard tells its channel again that it exists. */
export const SHARD_REFRESH_MS = 60 * 60_000;

/** Raised in a shard's object when its channel already lists {@link MAX_SHARDS_PER_CHANNEL} others. */
export class ShardLimitError extends Error {
  constructor() {
    super(`the channel already has ${MAX_SHARDS_PER_CHANNEL} shards`);
    this.name = "ShardLimitError";
  }
}

/** The channel's side: its shards' names, in its own storage. */
export class ShardRegistry {
  constructor(private readonly store: ChannelStore) {}

  /** Lists `shard` (or sees it again); false when the registry is full and does not list it. */
  register(channel: string, shard: string, now: number): boolean {
    this.store.remember(channel);
    this.store.revive();
    const sql = this.store.sql;
    const known = sql.exec("SELECT 1 FROM shards WHERE name = ?", shard).toArray().length > 0;
    if (!known) {
      const n = sql.exec<{ n: number }>("SELECT COUNT(*) AS n FROM shards").one().n;
      if (n >= MAX_SHARDS_PER_CHANNEL) return false;
    }
    sql.exec("INSERT OR REPLACE INTO shards (name, seen_at) VALUES (?, ?)", shard, now);
    this.store.set({ shards_seen_at: now });
    return true;
  }

  /** Forgets shards that are gone (deleted as idle, or found empty by a broadcast). */
  forget(names: readonly string[]): void {
    if (this.store.wiped || names.length === 0) return;
    for (const n of names) this.store.sql.exec("DELETE FROM shards WHERE name = ?", n);
  }

  /** The shards listed, by name. */
  names(): string[] {
    if (this.store.wiped) return [];
    return this.store.sql
      .exec<{ name: string }>("SELECT name FROM shards ORDER BY name")
      .toArray()
      .map((r) => r.name);
  }
}

/** A shard's side: telling its channel's object that it exists. */
export class ShardMembership {
  private joinedAt = 0;
  /** The key this object joined as (a wiped store no longer knows its name). */
  private key: string | null = null;

  constructor(private readonly env: Env) {}

  /**
   * Before a shard takes a publish, a subscriber or a drop count: its channel lists it (one call per
   * {@link SHARD_REFRESH_MS}; none for a channel that is not a shard).
   * @throws ShardLimitError when the channel lists as many shards as it keeps
   */
  async join(key: string): Promise<void> {
    const { channel, shard } = splitShardKey(key);
    if (shard === null) return;
    const now = Date.now();
    if (now - this.joinedAt < SHARD_REFRESH_MS) return;
    if (!(await channelStub(this.env, channel).registerShard(channel, shard, now))) throw new ShardLimitError();
    this.joinedAt = now;
    this.key = key;
  }

  /** Deleted as idle: the channel forgets this shard (best effort; a broadcast would find it empty anyway). */
  left(): void {
    const key = this.key;
    this.joinedAt = 0;
    this.key = null;
    if (key === null) return;
    const { channel, shard } = splitShardKey(key);
    if (shard === null) return;
    channelStub(this.env, channel)
      .forgetShards([shard])
      .catch(() => undefined);
  }
}
