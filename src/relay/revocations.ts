/**
 * Subscriptions of revoked sessions end (docs/security.md, "A revoked session ends"): while a relay
 * holds a subscriber whose token carries a session (`sid`, kept in a WebSocket's attachment so it
 * survives hibernation, or on the SSE stream), its alarm reads the list of revoked sessions
 * (src/refresh-ledger/revoked-sessions.ts) every {@link REVOCATION_CHECK_MS} and ends those on it:
 * a WebSocket with an `expired` frame (reason `session revoked`, its position as `seq`) and close
 * 4001, an SSE stream with `event: expired`. Counted as `revoked` in
 * `floodgate_subscriptions_closed_total`.
 *
 * Cost: nothing per subscribe; one call to the list per relay every 30 s, and only while it holds
 * such a subscriber (a relay of anonymous subscribers never asks, and one that is idle sleeps between).
 */
import type { AlarmScheduler } from "../platform/alarm-scheduler";
import { SESSION_REVOKED_REASON } from "../wire/close-codes";
import { countClosed } from "./closes";
import type { RelayLifetime, StreamPosition } from "./lifetime";
import { attachment, type RelaySubscribers } from "./subscribers";

/** How often a relay holding sessions reads the list: with the list written at once, within 60 s. */
export const REVOCATION_CHECK_MS = 30_000;

/** What the relay asks the list (the revoked-sessions ledger). */
export interface RevokedList {
  revokedSessions(nowSeconds: number): string[] | Promise<string[]>;
}

export class RelayRevocations {
  /** When the list is next read (epoch ms; 0: not scheduled). */
  private nextCheck = 0;

  constructor(
    private readonly subs: RelaySubscribers,
    private readonly alarms: AlarmScheduler,
    private readonly stream: StreamPosition,
    private readonly lifetime: () => RelayLifetime,
    private readonly list: () => RevokedList,
  ) {}

  /** A subscriber with a session joined: the list is read within {@link REVOCATION_CHECK_MS}. */
  scheduleCheck(now: number): void {
    if (this.nextCheck === 0 || this.nextCheck <= now) this.nextCheck = now + REVOCATION_CHECK_MS;
    this.alarms.request(this.nextCheck);
  }

  /**
   * On the alarm: when the list is due (and a subscriber holds a session), reads it and ends the
   * subscriptions of revoked sessions; then asks for the next read while sessions remain. A list that
   * cannot be read is asked again at the next check.
   */
  async check(now: number): Promise<void> {
    const held = this.sessions();
    if (held.size === 0) {
      this.nextCheck = 0;
      return;
    }
    // Not scheduled in this instance (back from eviction, its alarm fired): read the list now.
    if (this.nextCheck !== 0 && now < this.nextCheck) return this.alarms.request(this.nextCheck);
    this.nextCheck = now + REVOCATION_CHECK_MS;
    let revoked: string[];
    try {
      revoked = await this.list().revokedSessions(Math.floor(now / 1000));
    } catch (e) {
      console.error("floodgate relay: could not read the revoked sessions", e instanceof Error ? e.message : e);
      revoked = [];
    }
    const hit = new Set(revoked.filter((sid) => held.has(sid)));
    if (hit.size > 0) this.end(hit);
    if (this.sessions().size > 0) this.alarms.request(this.nextCheck);
    else this.nextCheck = 0;
  }

  reset(): void {
    this.nextCheck = 0;
  }

  /** The sessions the relay's open subscribers hold. */
  private sessions(): Set<string> {
    const held = new Set<string>();
    for (const ws of this.subs.sockets()) {
      const sid = attachment(ws)?.sid;
      if (sid) held.add(sid);
    }
    this.subs.hub.sessions(held);
    return held;
  }

  private end(sids: ReadonlySet<string>): void {
    const sockets = this.subs.sockets().filter((ws) => {
      const sid = attachment(ws)?.sid;
      return sid !== undefined && sids.has(sid);
    });
    // What is held for packed sockets goes out first: their position covers it.
    if (sockets.some((ws) => this.subs.isBatched(ws))) this.stream.flushHeld();
    const lifetime = this.lifetime();
    for (const ws of sockets) lifetime.endSocket(ws, SESSION_REVOKED_REASON);
    countClosed("revoked", sockets.length + lifetime.endStreams(sids, SESSION_REVOKED_REASON));
  }
}
