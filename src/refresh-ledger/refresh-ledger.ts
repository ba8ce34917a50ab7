/**
 * RefreshLedger — remembers spent refresh tokens so each works exactly once, and revokes a whole
 * refresh chain when one of its tokens is presented again (docs/api.md, Tokens; docs/security.md).
 *
 * One Durable Object per subject. KV would not do: it is eventually consistent, so two refreshes of
 * the same token at two locations could both succeed. Here check-and-insert is synchronous SQLite
 * inside a single-threaded object, so exactly one presenter wins.
 *
 * Reuse (RFC 9700, section 4.14.2): when a spent token comes back, the ledger cannot tell whether the client
 * or a thief sent it, so the chain it belongs to is revoked: the pair it returned, and any later pair,
 * can no longer be refreshed. That is stricter than the RFC (which revokes the active token only).
 *
 * Rows live until the token or the chain would expire anyway; an alarm then clears them, and a ledger
 * with nothing left keeps nothing in storage.
 *
 * One more instance keeps the list of revoked sessions that Worker isolates and relays read, so that
 * a revoked session's access tokens and subscriptions end too (src/refresh-ledger/revoked-sessions.ts).
 */
import { DurableObject } from "cloudflare:workers";
import { addRevoked, listRevoked } from "./revoked-sessions";

/** What presenting a refresh token did. */
export type SpendOutcome = "spent" | "reused" | "revoked";

export class RefreshLedger extends DurableObject<Env> {
  /** Whether this instance created its tables (again after `deleteAll`). */
  private ready = false;

  private tables(): SqlStorage {
    const sql = this.ctx.storage.sql;
    if (!this.ready) {
      sql.exec("CREATE TABLE IF NOT EXISTS spent (jti TEXT PRIMARY KEY, expires_at INTEGER NOT NULL)");
      sql.exec("CREATE TABLE IF NOT EXISTS revoked (sid TEXT PRIMARY KEY, expires_at INTEGER NOT NULL)");
      this.ready = true;
    }
    return sql;
  }

  /**
   * Spends a refresh token of chain `sid`: `spent` the first time; `reused` when it was spent already
   * (the chain is revoked now); `revoked` when its chain was revoked before.
   * @param expiresAt the token's `exp`, epoch seconds; after it the token is refused anyway.
   * @param chainEndsAt when the chain ends (SESSION_TTL after its first mint), epoch seconds.
   */
  async spend(
    jti: string,
    sid: string,
    expiresAt: number,
    chainEndsAt: number,
    nowSeconds: number,
  ): Promise<SpendOutcome> {
    const sql = this.tables();
    this.forgetExpired(nowSeconds);
    let outcome: SpendOutcome;
    if (sql.exec("SELECT 1 FROM revoked WHERE sid = ?", sid).toArray().length > 0) {
      outcome = "revoked";
    } else if (
      sql.exec("INSERT OR IGNORE INTO spent (jti, expires_at) VALUES (?, ?)", jti, expiresAt).rowsWritten > 0
    ) {
      outcome = "spent";
    } else {
      sql.exec("INSERT OR REPLACE INTO revoked (sid, expires_at) VALUES (?, ?)", sid, chainEndsAt);
      console.warn("floodgate: a spent refresh token was presented again; its refresh chain is revoked");
      outcome = "reused";
    }
    await this.scheduleCleanup();
    return outcome;
  }

  /**
   * The list's instance only: `sid` is revoked until `untilSeconds` (when its longest access token
   * would have expired, epoch seconds).
   */
  async revokeSession(sid: string, untilSeconds: number, nowSeconds: number): Promise<void> {
    this.forgetExpired(nowSeconds);
    if (addRevoked(this.tables(), sid, untilSeconds)) {
      console.warn("floodgate: the list of revoked sessions is full; the one ending first was dropped from it");
    }
    await this.scheduleCleanup();
  }

  /** The list's instance only: every session revoked whose access tokens may still be presented. */
  revokedSessions(nowSeconds: number): string[] {
    return listRevoked(this.tables(), nowSeconds);
  }

  /** Clears what has expired; when nothing is left, the object keeps nothing in storage. */
  override async alarm(): Promise<void> {
    this.forgetExpired(Math.floor(Date.now() / 1000));
    await this.scheduleCleanup();
  }

  private forgetExpired(nowSeconds: number): void {
    const sql = this.tables();
    sql.exec("DELETE FROM spent WHERE expires_at <= ?", nowSeconds);
    sql.exec("DELETE FROM revoked WHERE expires_at <= ?", nowSeconds);
  }

  /** An alarm at the latest expiry left, or no storage at all when there is none. */
  private async scheduleCleanup(): Promise<void> {
    const row = this.tables()
      .exec<{ last: number | null }>(
        "SELECT MAX(last) AS last FROM (SELECT MAX(expires_at) AS last FROM spent UNION ALL SELECT MAX(expires_at) FROM revoked)",
      )
      .one();
    if (row.last === null) {
      await this.ctx.storage.deleteAll();
      this.ready = false;
      return;
    }
    const at = row.last * 1000;
    const current = await this.ctx.storage.getAlarm();
    if (current === null || current < at) await this.ctx.storage.setAlarm(at);
  }
}
