/**
 * A sharded Pusher channel's counts as the HTTP API answers them (docs/api.md, "The Pusher door"):
 * the whole channel's, added up from the counts of each object that holds some of its subscribers
 * (its shards, and its own object). Subscriptions add up; members are distinct users, so a user
 * present in two shards counts once where the ids each object listed show it.
 *
 * Pure: the Worker asks the objects (src/worker/pusher/channel-counts.ts) and merges here.
 */

/** One object's counts: its subscriptions, its distinct members, and up to some number of their ids. */
export interface PartCounts {
  readonly subscriptions: number;
  readonly members: number;
  /** Distinct within the object; fewer than `members` when the object listed only the first ones. */
  readonly ids: readonly string[];
}

/** The channel's counts: `ids` distinct over every object, at most `limit` of them. */
export interface MergedCounts {
  subscriptions: number;
  members: number;
  ids: string[];
}

/**
 * Adds up `parts`. Members are the distinct ids the objects listed, plus each object's members past
 * those it listed: those are not compared, so a user among them present in two shards counts twice
 * (exact whenever each object listed all its members).
 */
export function mergeShardCounts(parts: readonly PartCounts[], limit: number): MergedCounts {
  let subscriptions = 0;
  let unlisted = 0;
  const distinct = new Set<string>();
  for (const p of parts) {
    subscriptions += p.subscriptions;
    unlisted += Math.max(0, p.members - p.ids.length);
    for (const id of p.ids) distinct.add(id);
  }
  return { subscriptions, members: distinct.size + unlisted, ids: [...distinct].slice(0, Math.max(0, limit)) };
}
