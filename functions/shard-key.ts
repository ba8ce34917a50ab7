/**
 * The name a shard's own channel object is found by (docs/api.md, "Shards"): `<channel>#<shard>`.
 * `#` is in neither a channel name's nor a shard name's grammar, so a key never collides with a real
 * channel and always splits back into one channel and one shard. Everything that keys by channel
 * (the channel object, its relays, the `throttleRate:` KV key, the sampler's registry, drop counts)
 * keys a shard by this name, so each shard is a channel of its own to all of them.
 *
 * Pure: shared by the Worker (src/settings/shards.ts) and the drop copies (functions/drop-copies.ts).
 */

/** Between the channel and the shard in a shard's key. */
export const SHARD_KEY_SEPARATOR = "#";

/** The object key of `channel`'s shard `shard`; the channel's own name when it has no shard. */
export function shardKey(channel: string, shard: string | null | undefined): string {
  return shard ? `${channel}${SHARD_KEY_SEPARATOR}${shard}` : channel;
}

/** A key split back into its channel name and shard (null: the key is a plain channel name). */
export function splitShardKey(key: string): { channel: string; shard: string | null } {
  const i = key.indexOf(SHARD_KEY_SEPARATOR);
  return i < 0 ? { channel: key, shard: null } : { channel: key.slice(0, i), shard: key.slice(i + 1) };
}
