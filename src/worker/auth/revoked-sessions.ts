/**
 * Which sessions are revoked, as this isolate knows it (docs/security.md, "A revoked session ends"):
 * a copy of the list the revoked-sessions ledger keeps (src/refresh-ledger/revoked-sessions.ts),
 * read again when it is {@link REVOKED_LIST_REFRESH_MS} old. An access token whose `sid` is on it
 * answers 401, so a revoked session's tokens stop working within a minute everywhere, and at once in
 * the isolate that saw the reuse.
 *
 * Cost: per request none (a set lookup); per isolate one ledger call each 30 s while tokens with a
 * session are presented, answered with the whole list (bounded, usually empty). Concurrent requests
 * do not share the call's promise (workerd refuses that across requests, functions/waiting.ts): one
 * reads the list while the others use the copy they have, unless it is {@link REVOKED_LIST_MAX_AGE_MS}
 * old, when each reads it. If the ledger cannot be read, the last copy is used (and the failure
 * logged): an outage of one object must not refuse every token.
 */
import { revokedSessionsStub } from "../../platform/stubs";
import { MAX_REVOKED_SESSIONS } from "../../refresh-ledger/revoked-sessions";

/** How old the copy may grow before one request reads the list again. */
export const REVOKED_LIST_REFRESH_MS = 30_000;
/** How old the copy may grow before every request reads it: 60 s, the bound docs/security.md states. */
export const REVOKED_LIST_MAX_AGE_MS = 60_000;

class RevokedSessions {
  private sids = new Set<string>();
  private readAt = Number.NEGATIVE_INFINITY;
  private reading = false;

  /** Whether `sid` is revoked, reading the list first when the copy is old. */
  async has(env: Env, sid: string, now = Date.now()): Promise<boolean> {
    const age = now - this.readAt;
    if (age >= REVOKED_LIST_MAX_AGE_MS || (age >= REVOKED_LIST_REFRESH_MS && !this.reading)) await this.read(env, now);
    return this.sids.has(sid);
  }

  /** This isolate saw the session revoked: its tokens are refused here at once. */
  add(sid: string): void {
    if (this.sids.size < MAX_REVOKED_SESSIONS) this.sids.add(sid);
  }

  /** Forgets the copy: the next check reads the list (a test's other isolate). */
  forget(): void {
    this.sids = new Set();
    this.readAt = Number.NEGATIVE_INFINITY;
  }

  private async read(env: Env, now: number): Promise<void> {
    this.reading = true;
    try {
      const list = await revokedSessionsStub(env).revokedSessions(Math.floor(now / 1000));
      this.sids = new Set(list.slice(0, MAX_REVOKED_SESSIONS));
      this.readAt = now;
    } catch (e) {
      console.error("floodgate: could not read the revoked sessions", e instanceof Error ? e.message : e);
      // Tried again in 5 s, not on every request meanwhile.
      this.readAt = Math.max(this.readAt, now - REVOKED_LIST_MAX_AGE_MS + 5_000);
    } finally {
      this.reading = false;
    }
  }
}

/** This isolate's copy. */
export const revokedSessions = new RevokedSessions();
