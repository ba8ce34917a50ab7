/**
 * RefreshLedger — remembers spent refresh tokens so each works exactly once (CONTRACT §3).
 *
 * One Durable Object per subject. KV would not do: it is eventually consistent, so two refreshes of
 * the same token at two locations could both succeed. Here the check-and-insert is one synchronous
 * SQLite statement inside a single-threaded object, so exactly one presenter wins.
 */
import { DurableObject } from "cloudflare:workers";

export class RefreshLedger extends DurableObject<Env> {
  constructor(ctx: DurableObjectState, env: Env) {
    super(ctx, env);
    ctx.storage.sql.exec("CREATE TABLE IF NOT EXISTS spent (jti TEXT PRIMARY KEY, expires_at INTEGER NOT NULL)");
  }

  /**
   * Marks a refresh token's `jti` spent until it expires. Returns false when it was spent already.
   * @param expiresAt the token's `exp`, epoch seconds; after it the token is refused anyway.
   */
  spend(jti: string, expiresAt: number, nowSeconds: number): boolean {
    const sql = this.ctx.storage.sql;
    sql.exec("DELETE FROM spent WHERE expires_at <= ?", nowSeconds);
    const inserted = sql.exec(
      "INSERT OR IGNORE INTO spent (jti, expires_at) VALUES (?, ?)",
      jti,
      expiresAt,
    ).rowsWritten;
    return inserted > 0;
  }
}
