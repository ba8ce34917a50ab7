/**
 * The tables of a rate-limit shard (src/limiter/limiter-shard.ts): one row per bucket that is not
 * full (a full bucket keeps nothing: docs/operations.md, "Storage bounded by activity"), indexed by
 * when it will be full so the alarm deletes those first; and one row per open lease an isolate holds.
 */
export function createLimiterTables(sql: SqlStorage): void {
  sql.exec(`CREATE TABLE IF NOT EXISTS bucket (
    key TEXT PRIMARY KEY, tokens REAL NOT NULL, updated_at INTEGER NOT NULL,
    rate INTEGER NOT NULL, per_ms REAL NOT NULL, burst INTEGER NOT NULL, full_at REAL NOT NULL)`);
  sql.exec("CREATE INDEX IF NOT EXISTS bucket_full_at ON bucket (full_at)");
  sql.exec(`CREATE TABLE IF NOT EXISTS lease (
    id TEXT PRIMARY KEY, key TEXT NOT NULL, tokens INTEGER NOT NULL, expires_at INTEGER NOT NULL)`);
  sql.exec("CREATE INDEX IF NOT EXISTS lease_key ON lease (key)");
}
