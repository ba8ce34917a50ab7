/**
 * The frames a subscriber receives (docs/api.md, "Subscribing", "Side frames"), as shapes: what the
 * server sends (built as text by ./frame-text.ts), what the TypeScript client hands an application
 * and what the dashboard reads. Pure and self-contained, so the client package ships it too.
 */

/** One delivered message (WebSocket text frame; SSE `message` event with `id: <seq>`). */
export interface MessageFrame {
  type: "message";
  channel: string;
  /** On a sharded channel only: the subscriber's shard (docs/api.md, "Shards"). */
  shard?: string;
  /**
   * The numbering `seq` counts in (docs/api.md, "Numbering restarts"): it changes whenever the
   * channel's seq starts again from 1. Resume with `?epoch=<epoch>&after=<seq>`.
   */
  epoch: string;
  seq: number;
  id: string;
  data: unknown;
  published_at: number;
}

/**
 * A summary of what the throttle dropped on a channel in [`from`, `to`) (epoch ms), grouped by the
 * value its `THROTTLE_SUMMARY` rule points to: the 20 largest keys and `"(other)"`, adding up to
 * `dropped`. A side frame: no seq, never in history, never replayed (docs/api.md, "Summaries of drops").
 */
export interface SummaryFrame {
  type: "summary";
  channel: string;
  shard?: string;
  from: number;
  to: number;
  dropped: number;
  by_key: Record<string, number>;
}

/**
 * What one subscriber skipped in [`from`, `to`) (epoch ms) for its own rate (`?max_rate=`) or because
 * its relay thinned it for reading too slowly (docs/api.md, "Each reader's rate"): `skipped` messages,
 * grouped in `by_key` like a summary of drops when the channel has a `THROTTLE_SUMMARY` rule. Every
 * message the channel delivered while it was subscribed is either received or counted in exactly one
 * of these. A side frame: no seq, never in history, never replayed.
 */
export interface SubscriberSummaryFrame {
  type: "summary";
  scope: "subscriber";
  channel: string;
  shard?: string;
  from: number;
  to: number;
  skipped: number;
  by_key?: Record<string, number>;
}

/**
 * A presence frame (docs/api.md, "Presence"), a side frame: `state` first (counting the new
 * subscriber), then `join` and `leave` in a small channel, or at most one `interval` per
 * `PRESENCE_INTERVAL` in a large one.
 */
export type PresenceFrame = { type: "presence"; channel: string; shard?: string } & (
  | { action: "state"; occupancy: number; subjects?: string[] }
  | { action: "join" | "leave"; subject: string | null; occupancy: number }
  | { action: "interval"; occupancy: number; joined: number; left: number }
);

/**
 * The last frame of a subscription whose token expired: resume with `?epoch=<epoch>&after=<seq>` and a
 * fresh token. `epoch` is absent when the relay has not heard it (a relay restarted since).
 */
export interface ExpiredFrame {
  type: "expired";
  reason: string;
  epoch?: string;
  seq: number;
}

/** Every frame a subscriber may receive; with `?batch=1` a WebSocket text frame is an array of them. */
export type SubscriberFrame = MessageFrame | SummaryFrame | SubscriberSummaryFrame | PresenceFrame | ExpiredFrame;

/** The SSE event name of each side frame (`event: summary`, `event: presence`, `event: expired`). */
export type SideEventName = "summary" | "presence" | "expired";
