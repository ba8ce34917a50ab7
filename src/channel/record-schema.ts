/**
 * The analytics record's columns and indexes on a channel's `messages` table (src/channel/store.ts
 * creates the table; src/channel/record.ts uses them).
 */

/**
 * Partial indexes: a channel that is not the record leaves both columns null, so its publishes write
 * no index entry. Each index ends in the rowid (seq), the tie-break of every order used. Objects
 * created before the columns existed get them added.
 */
export function addRecordColumns(sql: SqlStorage): void {
  const columns = new Set(
    sql
      .exec<{ name: string }>("PRAGMA table_info(messages)")
      .toArray()
      .map((r) => r.name),
  );
  if (!columns.has("source_channel")) sql.exec("ALTER TABLE messages ADD COLUMN source_channel TEXT");
  if (!columns.has("dropped_at")) sql.exec("ALTER TABLE messages ADD COLUMN dropped_at INTEGER");
  sql.exec(
    "CREATE INDEX IF NOT EXISTS messages_by_source ON messages (source_channel, seq) WHERE source_channel IS NOT NULL",
  );
  sql.exec("CREATE INDEX IF NOT EXISTS messages_by_drop_time ON messages (dropped_at) WHERE dropped_at IS NOT NULL");
  // The export by source channel and drop time reads the record in RECORD_BUCKET now: its index on
  // the channel would only cost every append a write.
  sql.exec("DROP INDEX IF EXISTS messages_by_source_time");
}
