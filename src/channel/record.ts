/**
 * The record's live view (docs/operations.md): the analytics channel's object keeps every copy the
 * queue's consumer hands it (src/worker/record/record-queue.ts) for `ANALYTICS_RETENTION` instead of
 * `HISTORY_LIMIT`, indexed by source channel and by drop time (src/channel/schema.ts) for
 * history filters and retention, and its alarm deletes expired copies in batches. The record itself
 * is in RECORD_BUCKET.
 */

import type { AlarmScheduler } from "../platform/alarm-scheduler";
import { isAnalytics } from "../settings/rules";
import { settingsOf } from "../settings/settings";
import type { RecordCounts } from "./calls";
import type { ChannelStore } from "./store";

/** Expired copies deleted per statement, and at most per alarm run before the object yields. */
export const EXPIRE_BATCH = 1000;
export const EXPIRE_PER_RUN = 20_000;
/** Ids one query of {@link ChannelRecord.held} asks about: a Durable Object's SQL binds at most 100 values. */
const HELD_QUERY_IDS = 100;

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
   * Whether this object is the analytics channel, kept by `ANALYTICS_RETENTION` rather than expired
   * as idle: it has received copies (so also after `ANALYTICS_CHANNEL` was renamed), or it bears the
   * configured name (a message published to it directly, before any copy, is kept for the retention too).
   */
  isRecord(): boolean {
    if (this.recordRole) return true;
    return this.store.channel !== null && isAnalytics(settingsOf(this.env), this.store.channel);
  }

  becomeRecord(): void {
    if (this.recordRole) return;
    this.recordRole = true;
    this.store.putMeta("record", "1");
    // Messages kept before this object knew it was the record expire by their own time.
    this.store.sql.exec("UPDATE messages SET dropped_at = published_at WHERE dropped_at IS NULL");
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
    const retention = settingsOf(this.env).analyticsRetentionMs;
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

  /**
   * Which of `ids` are copies kept already (a queue message delivered again carries them again): one
   * statement per {@link HELD_QUERY_IDS} ids, not one per copy.
   */
  held(ids: string[]): Set<string> {
    const kept = new Set<string>();
    for (let k = 0; k < ids.length; k += HELD_QUERY_IDS) {
      const some = ids.slice(k, k + HELD_QUERY_IDS);
      const rows = this.store.sql.exec<{ id: string }>(
        `SELECT id FROM messages INDEXED BY messages_by_copy_id WHERE id IN (${some.map(() => "?").join(", ")}) AND source_channel IS NOT NULL`,
        ...some,
      );
      for (const r of rows) kept.add(r.id);
    }
    return kept;
  }

  /** Makes sure the alarm will expire the oldest message the analytics channel keeps. */
  scheduleExpiry(): void {
    const oldest = this.oldestDroppedAt();
    if (oldest !== null) this.scheduler.request(oldest + settingsOf(this.env).analyticsRetentionMs);
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
