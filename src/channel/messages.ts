/**
 * A channel's retained messages: appending them in seq order, trimming to `HISTORY_LIMIT`, and the
 * history reads (docs/api.md, GET /v1/history). The analytics channel keeps its copies by
 * `ANALYTICS_RETENTION` instead (src/channel/record.ts).
 */

import { PAGE_MAX_BYTES } from "../relay/bounds";
import { settingsOf } from "../settings/settings";
import { frame } from "../wire/frame-text";
import { resumePoint } from "../wire/subscribe-params";
import type { CopyItem } from "./calls";
import type { ChannelStore, CounterValues } from "./store";

export interface MessageRow {
  [key: string]: SqlStorageValue;
  seq: number;
  id: string;
  data: string;
  publisher: string;
  published_at: number;
  /** Analytics channel only: the copy's source channel (null for a message published to it directly). */
  source_channel: string | null;
  /** Analytics channel only: when the message was dropped (its published_at for a direct publish). */
  dropped_at: number | null;
  /** A Pusher event's delivery details (src/wire/pusher/event-meta.ts), or null. */
  meta: string | null;
  /** 1 for a priority message, else null. */
  priority: number | null;
}

/**
 * Rows of a query, in its order, until they hold {@link PAGE_MAX_BYTES} of message text (at least
 * one row); `cut` when rows were left. The query's cursor is read lazily, so rows past the cut are
 * never loaded.
 */
export function takeBytes(cursor: Iterable<MessageRow>): { rows: MessageRow[]; cut: boolean } {
  const rows: MessageRow[] = [];
  let bytes = 0;
  for (const r of cursor) {
    if (rows.length > 0 && bytes + r.data.length > PAGE_MAX_BYTES) return { rows, cut: true };
    rows.push(r);
    bytes += r.data.length;
  }
  return { rows, cut: false };
}

export class MessageLog {
  /**
   * @param count counts traffic (src/channel/activity.ts): an append is a delivered message.
   * @param isRecord whether this object is the analytics record, which keeps its own columns and retention.
   */
  constructor(
    private readonly store: ChannelStore,
    private readonly env: Env,
    private readonly count: (deltas: CounterValues) => void,
    private readonly isRecord: () => boolean,
  ) {}

  /**
   * Appends one message; the batch around it trims history once, at its end. On the analytics channel
   * a message also stores its source channel and drop time (a direct publish: its own time), which
   * the record's indexes and retention use; elsewhere both stay null and cost no index entry.
   */
  append(
    data: string,
    publisher: string,
    now: number,
    copy?: Pick<CopyItem, "id" | "source_channel" | "dropped_at">,
    meta?: string,
  ): { seq: number; id: string } {
    const seq = this.store.counter("last_seq") + 1;
    const id = copy?.id ?? crypto.randomUUID();
    const record = this.isRecord();
    this.store.sql.exec(
      "INSERT INTO messages (seq, id, data, publisher, published_at, source_channel, dropped_at, meta) VALUES (?, ?, ?, ?, ?, ?, ?, ?)",
      seq,
      id,
      data,
      publisher,
      now,
      copy?.source_channel ?? null,
      copy?.dropped_at ?? (record ? now : null),
      meta ?? null,
    );
    this.count({ last_seq: 1, delivered_total: 1, period_delivered: 1 });
    this.store.live.push({ seq, id, data, published_at: now, ...(meta ? { meta } : {}) });
    return { seq, id };
  }

  /**
   * The message just appended at `seq` is a priority one: marked in history and in what goes live, so
   * relays never skip it for a subscriber's own rate (docs/api.md, "Each reader's rate"). A statement
   * of its own, for priority messages only: every other publish writes what it always did.
   */
  markPriority(seq: number): void {
    this.store.sql.exec("UPDATE messages SET priority = 1 WHERE seq = ?", seq);
    const live = this.store.live.at(-1);
    if (live?.seq === seq) live.priority = true;
  }

  trimHistory(): void {
    if (this.isRecord()) return; // kept for ANALYTICS_RETENTION instead, trimmed by the alarm
    const lastSeq = this.store.counter("last_seq");
    const limit = settingsOf(this.env).historyLimit;
    if (lastSeq > limit) this.store.sql.exec("DELETE FROM messages WHERE seq <= ?", lastSeq - limit);
  }

  /**
   * Retained messages as JSON frames, oldest first: after `after`, or the newest `limit`; with
   * `sourceChannel`, only copies of that channel's drops (analytics channel; through its index). A
   * page stops early, after at least one message, once it holds {@link PAGE_MAX_BYTES}.
   */
  history(after: number | null, limit: number, sourceChannel: string | null = null): string[] {
    if (this.store.wiped) return [];
    const from = sourceChannel === null ? "messages" : "messages INDEXED BY messages_by_source";
    const where = [sourceChannel === null ? "" : "source_channel = ?", after === null ? "" : "seq > ?"].filter(Boolean);
    const args = [sourceChannel, after].filter((a) => a !== null);
    const order = after === null ? "DESC" : "ASC";
    const { rows } = takeBytes(
      this.store.sql.exec<MessageRow>(
        `SELECT * FROM ${from} ${where.length ? `WHERE ${where.join(" AND ")}` : ""} ORDER BY seq ${order} LIMIT ?`,
        ...args,
        limit,
      ),
    );
    if (after === null) rows.reverse();
    const channel = this.store.channel ?? "";
    return rows.map((r) => frame(channel, this.store.epoch, r));
  }

  /**
   * A history page for a reader that names the numbering its `after` counts in (docs/api.md,
   * "Numbering restarts"): an `epoch` no longer the channel's reads from seq 1; `after` past the head
   * in the current numbering is answered with the head instead of a page, for the Worker's 400.
   */
  page(
    after: number | null,
    limit: number,
    sourceChannel: string | null,
    epoch: string | null,
  ): { frames: string[] } | { beyond: number } {
    const head = this.store.counter("last_seq");
    const from = resumePoint(after, epoch, { epoch: this.store.epoch, head });
    if (from === "beyond") return { beyond: head };
    return { frames: this.history(from, limit, sourceChannel) };
  }
}
