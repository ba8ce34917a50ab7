/**
 * The tables of a connection host (./connection-host.ts), created in one place. A host's sockets
 * survive hibernation, but a socket's attachment holds at most 2 KiB and a connection may hold 100
 * channels, so what each socket is subscribed to is stored here:
 *
 * - `host`: one row, who the host is (its name, group and k).
 * - `lanes`: each channel it serves (the channel object's key), with the last seq it sent on it, the
 *   generation of that write (./lane-seq.ts: a connection's attachment may hold a later one) and the
 *   count that channel last heard from it.
 * - `subscriptions`: each socket's subscriptions, with the seq below which it is sent nothing (its
 *   floor) and, on a presence channel, its member's id and `user_info`.
 *
 * All go when the host is left with no connection (deleteAll).
 */
export function createHostTables(sql: SqlStorage): void {
  sql.exec(`CREATE TABLE IF NOT EXISTS host (
    id INTEGER PRIMARY KEY CHECK (id = 1), name TEXT NOT NULL, grp TEXT NOT NULL, k INTEGER NOT NULL)`);
  sql.exec(`CREATE TABLE IF NOT EXISTS lanes (
    channel TEXT PRIMARY KEY, last_seq INTEGER NOT NULL, reported INTEGER NOT NULL DEFAULT 0,
    generation INTEGER NOT NULL DEFAULT 0)`);
  sql.exec(`CREATE TABLE IF NOT EXISTS subscriptions (
    socket TEXT NOT NULL, channel TEXT NOT NULL, floor INTEGER NOT NULL, user_id TEXT, user_info TEXT,
    PRIMARY KEY (socket, channel))`);
}

/**
 * Tables an older version made (a host's storage lasts while it holds a connection) gain what this one
 * adds: the lanes' `generation`. Run on a restart that finds the tables; tables made here have it.
 */
export function upgradeHostTables(sql: SqlStorage): void {
  const columns = sql.exec<{ name: string }>("SELECT name FROM pragma_table_info('lanes')").toArray();
  if (!columns.some((c) => c.name === "generation"))
    sql.exec("ALTER TABLE lanes ADD COLUMN generation INTEGER NOT NULL DEFAULT 0");
}

export interface HostRow {
  [key: string]: SqlStorageValue;
  name: string;
  grp: string;
  k: number;
}

export interface LaneRow {
  [key: string]: SqlStorageValue;
  channel: string;
  last_seq: number;
  reported: number;
  generation: number;
}

export interface SubscriptionRow {
  [key: string]: SqlStorageValue;
  socket: string;
  channel: string;
  floor: number;
  user_id: string | null;
  user_info: string | null;
}

/** Whether the tables exist (from the first connection until the host is left with none). */
export function hostTablesExist(sql: SqlStorage): boolean {
  return sql.exec<{ n: number }>("SELECT COUNT(*) AS n FROM sqlite_master WHERE name = 'host'").one().n > 0;
}
