/**
 * How long a relay's subscriptions last, and the SSE heartbeat (docs/api.md, "How long a subscription
 * lasts"): a subscription opened with a token ends when the token expires — the expiry is kept in the
 * WebSocket's attachment (it survives hibernation) or on the SSE stream, and the relay's one alarm,
 * set for the earliest expiry, closes it (WebSocket {@link TOKEN_EXPIRED_CLOSE}; SSE `event: expired`,
 * then the end). The same alarm writes every SSE stream a comment line each {@link SSE_HEARTBEAT_MS}:
 * the write is what finds a reader that went away, which then stops counting.
 */
import type { AlarmScheduler } from "../platform/alarm-scheduler";
import { attachment, type RelaySubscribers } from "./relay-subscribers";
import { SSE_HEARTBEAT_MS, TOKEN_EXPIRED_CLOSE, TOKEN_EXPIRED_REASON } from "./subscriber-bounds";

export class RelayLifetime {
  /** When SSE streams are next written a comment line (epoch ms; 0: not scheduled). */
  private nextHeartbeat = 0;

  constructor(
    private readonly subs: RelaySubscribers,
    private readonly alarms: AlarmScheduler,
  ) {}

  /**
   * Closes the subscriptions whose token expired by `now` and writes a due heartbeat; answers the
   * earliest expiry still to come (epoch ms, or Infinity).
   */
  expire(now: number): number {
    let earliest = Number.POSITIVE_INFINITY;
    for (const ws of this.subs.sockets()) {
      const expiresAt = attachment(ws)?.expiresAt ?? null;
      if (expiresAt === null) continue;
      if (expiresAt <= now) this.subs.closeSocket(ws, TOKEN_EXPIRED_CLOSE, TOKEN_EXPIRED_REASON);
      else earliest = Math.min(earliest, expiresAt);
    }
    const hub = this.subs.hub;
    hub.expire(now);
    if (hub.size > 0 && now >= this.nextHeartbeat) {
      hub.heartbeat();
      this.nextHeartbeat = 0;
    }
    return Math.min(earliest, hub.earliestExpiry() ?? Number.POSITIVE_INFINITY);
  }

  /** The alarm is due at the earliest expiry, and for the next heartbeat while SSE streams are open. */
  schedule(now: number, earliestExpiry: number): void {
    this.alarms.request(earliestExpiry);
    this.scheduleHeartbeat(now);
  }

  /** While SSE streams are open, the alarm is due for their next comment line. */
  scheduleHeartbeat(now: number): void {
    if (this.subs.hub.size === 0) return;
    if (this.nextHeartbeat <= now) this.nextHeartbeat = now + SSE_HEARTBEAT_MS;
    this.alarms.request(this.nextHeartbeat);
  }

  reset(): void {
    this.nextHeartbeat = 0;
  }
}
