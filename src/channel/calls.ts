/**
 * What the Worker, the sampler and relays exchange with a channel's object (src/channel/channel-object.ts)
 * by RPC: commands, their answers, and the counts it reports.
 */
import type { PeriodCounts } from "../../functions/sampler";
import type { SeriesPoint } from "../active-channels/series";

/** What the Worker asks the channel to do with one publish. */
export interface PublishCommand {
  channel: string;
  /** The message as minified JSON text. */
  data: string;
  publisher: string;
  /** The throttle's decision, made in the Worker. */
  action: "deliver" | "drop";
  /** A priority message (`Floodgate-Priority: high`): delivered, and counted as priority. */
  priority?: boolean;
  /** A dropped message's key for the channel's summary (functions/drop-summary.ts); absent: none. */
  summaryKey?: string;
  idempotencyKey?: string;
  /** A Pusher event's delivery details (src/wire/pusher/event-meta.ts), kept with the message. */
  meta?: string;
  now: number;
}

/**
 * The channel's current drop rate from its fast loop, carried to the isolate in every answer; null
 * when the channel has no target (KV's rate rules).
 */
export type ChannelRate = number | null;

/** What `ChannelObject.publishMany` answers: one outcome per command, and the current rate. */
export interface PublishManyResult {
  outcomes: PublishOutcome[];
  drop_rate: ChannelRate;
}

export type PublishOutcome =
  | {
      status: "delivered";
      channel: string;
      shard?: string;
      /** The channel's numbering the seq counts in (docs/api.md, "Numbering restarts"). */
      epoch: string;
      seq: number;
      id: string;
      published_at: number;
      replayed: boolean;
    }
  | { status: "dropped"; replayed: boolean };

/** One copy of a dropped message for the analytics channel (its JSON text and what it is indexed by). */
export interface CopyItem {
  /** The copy's message id, made when the message was dropped (a failure log names the same id). */
  id: string;
  data: string;
  publisher: string;
  source_channel: string;
  dropped_at: number;
}

export interface RecordCounts {
  /** Copies ever appended. */
  copies_total: number;
  /** Copies retained now (appended minus expired). */
  copies_kept: number;
  /** Copies deleted by `ANALYTICS_RETENTION`. */
  copies_expired_total: number;
  /** `dropped_at` of the oldest message retained, or null when none is. */
  oldest_dropped_at: number | null;
}

/**
 * One sampling period, handed to the sampler and then reset: the law's own counts
 * (functions/sampler.ts; `occupancy` totals every relay) and what the sweep needs beside them.
 */
export interface ChannelPeriod {
  channel: string | null;
  counts: PeriodCounts;
  /** When the period began (epoch ms). */
  startedAt: number;
  /** The fast loop's current rate, or null when the channel has no fast loop. */
  fastRate: ChannelRate;
  /** When the fast loop last decided (epoch ms), or null when it never has. */
  fastDecidedAt: number | null;
  /** The fast loop's decisions since the previous visit, for the dashboard's series. */
  fastPoints?: SeriesPoint[];
}

/** A slot on a relay for one subscriber, with the channel's head seq and epoch when it was taken. */
export type RelaySlot =
  | { relay: string; group: string; k: number; reservation: string; head: number; epoch: string }
  | { full: true }
  /** The client holds MAX_SUBSCRIPTIONS_PER_CLIENT subscriptions of this channel already. */
  | { clientFull: true }
  /** Anonymous clients of the client's IPv6 /48 hold 10 × MAX_SUBSCRIPTIONS_PER_CLIENT of it already. */
  | { netFull: true }
  /** Anonymous subscribers hold ANONYMOUS_SHARE × MAX_SUBSCRIBERS of it already (src/channel/client-cap.ts). */
  | { anonymousFull: true };

/**
 * A subscriber's slot, or a resume past the head in the channel's current numbering (docs/api.md,
 * "Numbering restarts"), which takes no slot.
 */
export type RelayAssignment = RelaySlot | { beyond: true; head: number };

export interface ChannelStats {
  channel: string | null;
  /** Subscribers of every relay together. */
  occupancy: number;
  websockets: number;
  sse: number;
  /** Relays serving the channel. */
  relays: number;
  /** Delivery calls made from the channel to its relays (each carries one batch, or the head only). */
  relay_sends_total: number;
  last_seq: number;
  delivered_total: number;
  dropped_total: number;
  /** Priority messages delivered (docs/api.md, "Priority messages"), counted in `delivered_total` too. */
  priority_total: number;
  analytics_copy_failures_total: number;
  /** Subscribers disconnected for falling too far behind (WebSocket and SSE). */
  slow_consumers_closed: number;
  last_sample: unknown;
  /** The last summary of drops this channel sent (docs/api.md, "Summaries of drops"), or null. */
  last_summary: unknown;
  /** Set on the analytics channel only. */
  record: RecordCounts | null;
  /** Presence's mode, and the relay lines given presence frames or woken for it (this instance). */
  presence: { mode: "announce" | "interval"; sends_total: number };
  /** Subscribers thinned now (own `max_rate` or slowness) and messages skipped for them in all (src/channel/readers.ts). */
  readers: { thinned: number; skipped_total: number };
}
