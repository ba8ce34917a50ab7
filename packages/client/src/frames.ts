// The frames a subscription receives (docs/api.md): messages, summaries of drops, presence, expiry.

export interface Message {
  type: "message";
  channel: string;
  /** On a sharded channel only: the subscriber's shard (docs/api.md, "Shards"). */
  shard?: string;
  seq: number;
  id: string;
  data: unknown;
  published_at: number;
}

/**
 * A summary of what the throttle dropped on a channel in [`from`, `to`) (epoch ms), grouped by the
 * value its `THROTTLE_SUMMARY` rule points to: the 20 largest keys and `"(other)"`, adding up to
 * `dropped`. It carries no seq: it is never in history and never replayed (docs/api.md, "Summaries
 * of drops").
 */
export interface Summary {
  type: "summary";
  channel: string;
  from: number;
  to: number;
  dropped: number;
  by_key: Record<string, number>;
}

/**
 * A presence frame (docs/api.md, "Presence"): `state` first (counting this subscriber), then `join`
 * and `leave` in a small channel, or at most one `interval` per `PRESENCE_INTERVAL` in a large one.
 */
export type PresenceFrame =
  | { type: "presence"; channel: string; action: "state"; occupancy: number; subjects?: string[] }
  | { type: "presence"; channel: string; action: "join" | "leave"; subject: string | null; occupancy: number }
  | { type: "presence"; channel: string; action: "interval"; occupancy: number; joined: number; left: number };

/** The last frame of a subscription whose token expired: `seq` is where it stood, to resume from. */
export interface ExpiredFrame {
  type: "expired";
  seq?: unknown;
}
