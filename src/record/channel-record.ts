/**
 * The record of dropped messages (docs/operations.md): the analytics channel's object keeps every
 * copy for `ANALYTICS_RETENTION` instead of `HISTORY_LIMIT`, indexed by source channel and by drop
 * time (src/record/record-schema.ts) for history filters and exports, and its alarm deletes expired
 * copies in batches.
 */
import type { ChannelStore } from "../channel/channel-store";
import { frame } from "../channel/frames";
import { type MessageRow, takeBytes } from "../channel/messages";
import type { ExportCursor, RecordCounts } from "../channel/types";
import type { AlarmScheduler } from "../platform/alarm-scheduler";
import { getConfig } from "../platform/config";

/** Expired copies deleted per statement, and at most per alarm run before the object yields. */
export const EXPIRE_BATCH = 1000;
export const EXPIRE_PER_RUN = 20_000;

export class ChannelRecord {
  /** Set once this object has received analytics copies (stored in meta as "record"). */
  private recordRole = false;

  constructor(
    private readonly store: ChannelStore,
    private readonly scheduler: AlarmScheduler,
    private readonly env: Env,
  ) {}

  load(meta: Map<string, string>): void {
    this.recordRole = meta.has("record");
  }

  /**
   * Whether this object is the analytics channel: it has received copies, or it bears the configured
   * name (a message published to it directly, before any copy, is kept for the retention too).
   */
  isRecord(): boolean {
    if (this.recordRole) return true;
    if (this.store.channel === null) return false;
    try {
      return this.store.channel === getConfig(this.env).analyticsChannel.name;
    } catch {
      return false; // bad config: the Worker refuses every request anyway
    }
  }

  /**
   * Whether this object is kept by `ANALYTICS_RETENTION` rather than expired as idle: the record of
   * dropped messages (also after `ANALYTICS_CHANNEL` was renamed), or the configured analytics channel.
   */
  isAnalytics(): boolean {
    if (this.isRecord()) return true;
    try {
      return this.store.channel !== null && this.store.channel === getConfig(this.env).analyticsChannel.name;
    } catch {
      return true; // bad configuration: never delete on a guess
    }
  }

  becomeRecord(): void {
    if (this.recordRole) return;
    this.recordRole = true;
    this.store.putMeta("record", "1");
    // Messages kept before this object knew it was the record expire by their own time.
    this.store.sql.exec("UPDATE messages SET dropped_at = published_at WHERE dropped_at IS NULL");
  }

  /**
   * One page of the export: copies with `dropped_at` in [from, to) (of one source channel, if given)
   * after `cursor`, one frame per line; at most `maxRows` copies and about `PAGE_MAX_BYTES`. `next`
   * is null on the last page.
   *
   * Copies keep arriving while an export runs, late ones with a drop time the export has passed. So
   * the export takes the copies there when it began (seq up to the first page's last seq) in drop
   * time order, through an index; then the copies appended since, in append order (seq, the primary
   * key: only those are scanned), until a page finds no more. Every copy in the window appended before
   * the export's last page was read goes out exactly once.
   */
  exportPage(
    from: number,
    to: number,
    sourceChannel: string | null,
    cursor: ExportCursor | null,
    maxRows: number,
  ): { ndjson: string; next: ExportCursor | null } {
    if (this.store.wiped) return { ndjson: "", next: null };
    const at = cursor ?? { dropped_at: from, seq: -1, upTo: this.store.counter("last_seq") };
    const limit = maxRows + 1;
    const self = this;
    // One row more than a page was asked for, to know whether another page follows.
    function* copies(): Generator<MessageRow> {
      let n = 0;
      if (!at.tail) {
        for (const r of self.byDropTime(from, to, sourceChannel, at, limit)) {
          n++;
          yield r;
        }
      }
      // The copies there at the start are all out: then those appended since.
      if (n < limit) yield* self.byAppend(from, to, sourceChannel, at.tail ? at.seq : at.upTo, limit - n);
    }
    const { rows, cut } = takeBytes(copies());
    const more = cut || rows.length > maxRows;
    const page = rows.slice(0, maxRows);
    const last = page[page.length - 1];
    let next: ExportCursor | null = null;
    if (more && last) {
      next =
        last.seq > at.upTo
          ? { dropped_at: to, seq: last.seq, upTo: at.upTo, tail: true }
          : { dropped_at: last.dropped_at as number, seq: last.seq, upTo: at.upTo };
    }
    const channel = this.store.channel ?? "";
    return { ndjson: page.map((r) => `${frame(channel, r)}\n`).join(""), next };
  }

  /** Copies there when the export began (seq ≤ `upTo`) after (`dropped_at`, `seq`), by drop time, through an index. */
  private byDropTime(
    from: number,
    to: number,
    sourceChannel: string | null,
    after: ExportCursor,
    limit: number,
  ): Iterable<MessageRow> {
    const start = Math.max(from, after.dropped_at);
    const sql = this.store.sql;
    return sourceChannel === null
      ? sql.exec<MessageRow>(
          `SELECT * FROM messages INDEXED BY messages_by_drop_time
           WHERE dropped_at >= ? AND dropped_at < ? AND (dropped_at, seq) > (?, ?) AND seq <= ?
           ORDER BY dropped_at, seq LIMIT ?`,
          start,
          to,
          after.dropped_at,
          after.seq,
          after.upTo,
          limit,
        )
      : sql.exec<MessageRow>(
          `SELECT * FROM messages INDEXED BY messages_by_source_time
           WHERE source_channel = ? AND dropped_at >= ? AND dropped_at < ? AND (dropped_at, seq) > (?, ?) AND seq <= ?
           ORDER BY dropped_at, seq LIMIT ?`,
          sourceChannel,
          start,
          to,
          after.dropped_at,
          after.seq,
          after.upTo,
          limit,
        );
  }

  /** Copies in the window appended after seq `after`, in append order. */
  private byAppend(from: number, to: number, sourceChannel: string | null, after: number, limit: number) {
    const sql = this.store.sql;
    return sourceChannel === null
      ? sql.exec<MessageRow>(
          `SELECT * FROM messages WHERE seq > ? AND dropped_at >= ? AND dropped_at < ? ORDER BY seq LIMIT ?`,
          after,
          from,
          to,
          limit,
        )
      : sql.exec<MessageRow>(
          `SELECT * FROM messages INDEXED BY messages_by_source
           WHERE source_channel = ? AND seq > ? AND dropped_at >= ? AND dropped_at < ? ORDER BY seq LIMIT ?`,
          sourceChannel,
          after,
          from,
          to,
          limit,
        );
  }

  /** The analytics channel's copies: appended, kept and expired (all zero on any other channel). */
  counts(): RecordCounts {
    const total = this.store.counter("copies_total");
    const expired = this.store.counter("copies_expired_total");
    return {
      copies_total: total,
      copies_kept: total - expired,
      copies_expired_total: expired,
      oldest_dropped_at: this.oldestDroppedAt(),
    };
  }

  /**
   * Retention of the analytics channel: deletes messages whose `dropped_at` is older than
   * `ANALYTICS_RETENTION`, {@link EXPIRE_BATCH} at a time through the drop-time index, at most
   * {@link EXPIRE_PER_RUN} per run so publishes get their turn; never on the publish path. Asks the
   * alarm for its next run: at once when it stopped at its limit, else when the oldest message kept
   * expires.
   */
  expireCopies(now: number): void {
    const due = this.expire(now);
    if (due !== null) this.scheduler.request(due);
  }

  private expire(now: number): number | null {
    if (this.store.wiped || !this.isRecord()) return null;
    const retention = getConfig(this.env).analyticsRetentionMs;
    const cutoff = now - retention;
    for (let deleted = 0; deleted < EXPIRE_PER_RUN; ) {
      let n = 0;
      this.store.inBatch(() => {
        const gone = this.store.sql
          .exec<{ source_channel: string | null }>(
            `DELETE FROM messages WHERE seq IN (
               SELECT seq FROM messages INDEXED BY messages_by_drop_time WHERE dropped_at < ? ORDER BY dropped_at LIMIT ?)
             RETURNING source_channel`,
            cutoff,
            EXPIRE_BATCH,
          )
          .toArray();
        n = gone.length;
        // Messages published to the channel directly expire too, but only copies are counted.
        this.store.bump({ copies_expired_total: gone.filter((r) => r.source_channel !== null).length });
      });
      deleted += n;
      if (n < EXPIRE_BATCH) {
        const oldest = this.oldestDroppedAt();
        return oldest === null ? null : oldest + retention;
      }
    }
    return now;
  }

  /** Makes sure the alarm will expire the oldest message the analytics channel keeps. */
  scheduleExpiry(): void {
    const oldest = this.oldestDroppedAt();
    if (oldest !== null) this.scheduler.request(oldest + getConfig(this.env).analyticsRetentionMs);
  }

  private oldestDroppedAt(): number | null {
    if (this.store.wiped) return null;
    const row = this.store.sql
      .exec<{ dropped_at: number }>(
        "SELECT dropped_at FROM messages INDEXED BY messages_by_drop_time WHERE dropped_at IS NOT NULL ORDER BY dropped_at LIMIT 1",
      )
      .toArray()[0];
    return row ? row.dropped_at : null;
  }
}
