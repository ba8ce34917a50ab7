/**
 * The list of revoked sessions every Worker isolate and relay reads (docs/security.md, "A revoked
 * session ends"): kept by one `RefreshLedger` instance of its own (src/platform/stubs.ts
 * `revokedSessionsStub`; no subject has its name), in the same `revoked` table a subject's
 * ledger keeps its revoked chains in. A row lasts until the longest access token of its session would
 * have expired; after that nothing of the session is accepted anyway.
 *
 * Readers fetch the whole list (src/worker/auth/revoked-sessions.ts every 30 s per isolate, a relay
 * every 30 s while it holds a subscriber with a session), so it is bounded: past
 * {@link MAX_REVOKED_SESSIONS} rows the one that would expire first goes (its session's access tokens
 * then live to their `exp`, as before revocation existed; its refresh chain stays revoked in its
 * subject's ledger).
 */

/** Most sessions the list holds at once (about 40 bytes each on the wire). */
export const MAX_REVOKED_SESSIONS = 10_000;

/** Adds `sid` until `untilSeconds` (epoch seconds); answers whether an older row had to go. */
export function addRevoked(sql: SqlStorage, sid: string, untilSeconds: number): boolean {
  const before = sql.exec<{ until: number }>("SELECT expires_at AS until FROM revoked WHERE sid = ?", sid).toArray()[0];
  if (before) {
    if (before.until < untilSeconds) sql.exec("UPDATE revoked SET expires_at = ? WHERE sid = ?", untilSeconds, sid);
    return false;
  }
  const n = sql.exec<{ n: number }>("SELECT COUNT(*) AS n FROM revoked").one().n;
  let evicted = false;
  if (n >= MAX_REVOKED_SESSIONS) {
    sql.exec(
      "DELETE FROM revoked WHERE sid IN (SELECT sid FROM revoked ORDER BY expires_at LIMIT ?)",
      n - MAX_REVOKED_SESSIONS + 1,
    );
    evicted = true;
  }
  sql.exec("INSERT INTO revoked (sid, expires_at) VALUES (?, ?)", sid, untilSeconds);
  return evicted;
}

/** Every session revoked and not yet past its last access token. */
export function listRevoked(sql: SqlStorage, nowSeconds: number): string[] {
  return sql
    .exec<{ sid: string }>("SELECT sid FROM revoked WHERE expires_at > ?", nowSeconds)
    .toArray()
    .map((r) => r.sid);
}
