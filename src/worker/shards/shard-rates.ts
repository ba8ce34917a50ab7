/**
 * The drop-rate keys of a channel's shards (docs/api.md, "Shards"). A shard without a key of its own
 * runs at its channel's (functions/before-publish.ts), so "every shard" is the channel's key plus
 * none of their own: a rate set without `?shard=` removes the shards' own keys, listed from KV by
 * prefix, not only those of the shards the channel's registry lists at that moment.
 */
import { rateKey } from "../../../functions/before-publish";
import { SHARD_KEY_SEPARATOR } from "../../../functions/shard-key";

/** Every stored `throttleRate:<channel>#<shard>` key (one KV list per 1,000 keys). */
export async function shardRateKeys(kv: KVNamespace, channel: string): Promise<string[]> {
  const prefix = rateKey(channel) + SHARD_KEY_SEPARATOR;
  const keys: string[] = [];
  let cursor: string | undefined;
  do {
    const page = await kv.list({ prefix, cursor });
    for (const k of page.keys) keys.push(k.name);
    cursor = page.list_complete ? undefined : page.cursor;
  } while (cursor);
  return keys;
}
