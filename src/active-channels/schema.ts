/**
 * The tables of the registry of active channels (src/active-channels/active-channels.ts):
 * - `active`: channels marked busy since the sampler's last run, with their weight, heaviest first;
 * - `throttled`: channels whose rate the sampler holds, until it releases them;
 * - `meta`: the run's generation and other named numbers;
 * - `seen`: channels seen recently, with their latest sample and summary of drops (the dashboard's list);
 * - `targets`: runtime targets set through the admin API;
 * - `series`: the dashboard's series, one row per decision of either loop (src/active-channels/series.ts);
 * - `pusher_channels`: the occupied Pusher channels with their presence members (src/active-channels/pusher-channels.ts).
 */
export function createActiveChannelsTables(sql: SqlStorage): void {
  sql.exec(`CREATE TABLE IF NOT EXISTS active (
    channel TEXT PRIMARY KEY, generation INTEGER NOT NULL, weight INTEGER NOT NULL DEFAULT 0,
    marked_at INTEGER NOT NULL DEFAULT 0)`);
  // A run reads the heaviest marks first and expiry the oldest: each through its own index.
  sql.exec("CREATE INDEX IF NOT EXISTS active_by_weight ON active (weight DESC, generation ASC)");
  sql.exec("CREATE INDEX IF NOT EXISTS active_by_marked_at ON active (marked_at)");
  sql.exec("CREATE TABLE IF NOT EXISTS throttled (channel TEXT PRIMARY KEY, visited_at INTEGER NOT NULL DEFAULT 0)");
  sql.exec("CREATE INDEX IF NOT EXISTS throttled_by_visit ON throttled (visited_at)");
  sql.exec("CREATE TABLE IF NOT EXISTS meta (name TEXT PRIMARY KEY, value INTEGER NOT NULL)");
  sql.exec(
    "CREATE TABLE IF NOT EXISTS seen (channel TEXT PRIMARY KEY, at INTEGER NOT NULL, sample TEXT, summary TEXT)",
  );
  sql.exec("CREATE TABLE IF NOT EXISTS targets (channel TEXT PRIMARY KEY, target TEXT NOT NULL)");
  sql.exec(
    "CREATE TABLE IF NOT EXISTS series (channel TEXT NOT NULL, at INTEGER NOT NULL, by TEXT NOT NULL, point TEXT NOT NULL, PRIMARY KEY (channel, at, by))",
  );
  sql.exec("CREATE TABLE IF NOT EXISTS pusher_channels (channel TEXT PRIMARY KEY, users INTEGER NOT NULL)");
}
