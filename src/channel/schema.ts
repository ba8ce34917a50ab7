/**
 * Every table of a channel's object (src/channel/channel-object.ts), created in one place:
 * src/channel/store.ts runs {@link createChannelTables} on the first write (a channel never written
 * to stores nothing) and again after idle expiry deleted everything.
 *
 * - `messages`: the history (`seq` is the rowid, the tie-break of every order used). On the analytics
 *   channel each copy also keeps its `source_channel` and `dropped_at` (src/channel/record.ts), each
 *   behind a partial index, and its `id` behind a third (a copy delivered again is not appended
 *   twice): any other channel leaves both null, so its publishes write no index entry.
 *   A Pusher event keeps its delivery details in `meta` (src/wire/pusher/event-meta.ts), else null.
 *   `priority` marks a priority message (1, else null), so a relay that thins a subscriber knows it in
 *   a replay or a repair too (docs/api.md, "Each reader's rate").
 * - `idempotency`: `Idempotency-Key`s and the result they answer, for 10 minutes (src/channel/publishing.ts).
 * - `counters` and `meta`: the channel's totals and named values (src/channel/store.ts).
 * - `relays`: the relays holding its subscribers, with each one's counts and per-client counts
 *   (src/channel/relay-registry.ts).
 * - `shards`: on a sharded channel's own object, the shards it has seen (src/channel/shard-registry.ts).
 */
export function createChannelTables(sql: SqlStorage): void {
  sql.exec(`CREATE TABLE IF NOT EXISTS messages (
      seq INTEGER PRIMARY KEY, id TEXT NOT NULL, data TEXT NOT NULL, publisher TEXT NOT NULL,
      published_at INTEGER NOT NULL, source_channel TEXT, dropped_at INTEGER, meta TEXT, priority INTEGER)`);
  // Local development storage made before these columns existed gets them (nothing is deployed yet).
  addColumn(sql, "messages", "meta", "TEXT");
  addColumn(sql, "messages", "priority", "INTEGER");
  sql.exec(
    "CREATE INDEX IF NOT EXISTS messages_by_source ON messages (source_channel, seq) WHERE source_channel IS NOT NULL",
  );
  sql.exec("CREATE INDEX IF NOT EXISTS messages_by_drop_time ON messages (dropped_at) WHERE dropped_at IS NOT NULL");
  sql.exec("CREATE INDEX IF NOT EXISTS messages_by_copy_id ON messages (id) WHERE source_channel IS NOT NULL");
  sql.exec(`CREATE TABLE IF NOT EXISTS idempotency (
      key TEXT PRIMARY KEY, result TEXT NOT NULL, expires_at INTEGER NOT NULL)`);
  sql.exec("CREATE INDEX IF NOT EXISTS idempotency_expiry ON idempotency (expires_at)");
  sql.exec("CREATE TABLE IF NOT EXISTS counters (name TEXT PRIMARY KEY, value INTEGER NOT NULL)");
  sql.exec("CREATE TABLE IF NOT EXISTS meta (name TEXT PRIMARY KEY, value TEXT NOT NULL)");
  sql.exec(`CREATE TABLE IF NOT EXISTS relays (
      name TEXT PRIMARY KEY, grp TEXT NOT NULL, k INTEGER NOT NULL, websockets INTEGER NOT NULL, sse INTEGER NOT NULL,
      clients TEXT NOT NULL DEFAULT '[]')`);
  sql.exec("CREATE TABLE IF NOT EXISTS shards (name TEXT PRIMARY KEY, seen_at INTEGER NOT NULL)");
}

/** Adds a column to a table made before the column existed (local development storage). */
function addColumn(sql: SqlStorage, table: string, column: string, type: string): void {
  const columns = sql.exec<{ name: string }>(`SELECT name FROM pragma_table_info('${table}')`).toArray();
  if (!columns.some((c) => c.name === column)) sql.exec(`ALTER TABLE ${table} ADD COLUMN ${column} ${type}`);
}

/** Whether a channel's tables exist (they do from its first write until idle expiry deletes them). */
export function channelTablesExist(sql: SqlStorage): boolean {
  return (
    sql.exec<{ n: number }>("SELECT COUNT(*) AS n FROM sqlite_master WHERE type = 'table' AND name = 'counters'").one()
      .n > 0
  );
}
