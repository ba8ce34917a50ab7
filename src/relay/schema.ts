/**
 * The one table of a relay (src/relay/relay.ts): a single row holding who it is, the last seq it
 * sent (so a restarted relay neither skips nor repeats a frame) and the counts its channel last heard.
 * Created with the relay's first subscriber; deleted with everything else when it leaves its channel.
 */
export function createRelayTable(sql: SqlStorage): void {
  sql.exec(`CREATE TABLE IF NOT EXISTS relay (
    id INTEGER PRIMARY KEY CHECK (id = 1), channel TEXT NOT NULL, relay TEXT NOT NULL, grp TEXT NOT NULL,
    k INTEGER NOT NULL, last_seq INTEGER NOT NULL, reported_ws INTEGER NOT NULL, reported_sse INTEGER NOT NULL)`);
}

/** The relay's row, once it has one. */
export function readRelayRow(sql: SqlStorage): RelayRow | null {
  const stored = sql
    .exec<{ n: number }>("SELECT COUNT(*) AS n FROM sqlite_master WHERE type = 'table' AND name = 'relay'")
    .one().n;
  if (stored === 0) return null;
  return sql.exec<RelayRow>("SELECT * FROM relay").toArray()[0] ?? null;
}

export interface RelayRow {
  [key: string]: SqlStorageValue;
  channel: string;
  relay: string;
  grp: string;
  k: number;
  last_seq: number;
  reported_ws: number;
  reported_sse: number;
}
