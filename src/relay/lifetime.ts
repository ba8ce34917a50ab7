/**
 * How long a relay's subscriptions last, and the SSE heartbeat (docs/api.md, "How long a subscription
 * lasts"): a subscription opened with a token ends when the token expires (an anonymous SSE stream
 * after SSE_ANONYMOUS_MAX_MS, src/relay/bounds.ts; one of a revoked session sooner,
 * src/relay/revocations.ts). The expiry is kept in the WebSocket's attachment (it survives
 * hibernation) or on the SSE stream, and the relay's one alarm, set for the earliest expiry, closes
 * it (WebSocket: an `expired` frame, then {@link TOKEN_EXPIRED_CLOSE}; SSE: `event: expired`, then
 * the end). The expired frame carries the subscriber's position, so its client resumes from there
 * with `?after=` and loses nothing sent while it was away. The same alarm writes every SSE stream a
 * comment line each {@link SSE_HEARTBEAT_MS}: the write is what finds a reader that went away, which
 * then stops counting.
 */
import type { AlarmScheduler } from "../platform/alarm-scheduler";
import { TOKEN_EXPIRED_CLOSE, TOKEN_EXPIRED_REASON } from "../wire/close-codes";
import { expiredFrame } from "../wire/frame-text";
import { SSE_HEARTBEAT_MS } from "./bounds";
import { countClosed } from "./closes";
import type { SseClient } from "./sse-hub";
import { attachment, type RelaySubscribers, type Subscriber } from "./subscribers";

/** What the lifetime needs of the relay's stream (src/relay/stream.ts). */
export interface StreamPosition {
  /** The last seq a subscriber has been sent or is past. */
  positionOf(sub: Subscriber): number;
  /** The channel's epoch as last heard (docs/api.md, "Numbering restarts"), if any. */
  readonly epoch: string | undefined;
  /** Sends the frames held for packed sockets now. */
  flushHeld(): void;
  /** The subscriber's last summary of what it skipped, if it is thinned (docs/api.md, "Each reader's rate"). */
  readonly thinned: { finish(sub: WebSocket | SseClient): void };
}

export class RelayLifetime {
  /** When SSE streams are next written a comment line (epoch ms; 0: not scheduled). */
  private nextHeartbeat = 0;

  constructor(
    private readonly subs: RelaySubscribers,
    private readonly alarms: AlarmScheduler,
    private readonly stream: StreamPosition,
  ) {}

  /**
   * Closes the subscriptions whose token expired by `now` and writes a due heartbeat; answers the
   * earliest expiry still to come (epoch ms, or Infinity).
   */
  expire(now: number): number {
    let earliest = Number.POSITIVE_INFINITY;
    const expired: WebSocket[] = [];
    for (const ws of this.subs.sockets()) {
      const expiresAt = attachment(ws)?.expiresAt ?? null;
      if (expiresAt === null) continue;
      if (expiresAt <= now) expired.push(ws);
      else earliest = Math.min(earliest, expiresAt);
    }
    // What is held for packed sockets goes out first: an expiring one is sent what is owed to it,
    // and its position covers it.
    if (expired.some((ws) => this.subs.isBatched(ws))) this.stream.flushHeld();
    for (const ws of expired) this.endSocket(ws, TOKEN_EXPIRED_REASON);
    const hub = this.subs.hub;
    const sseExpired = hub.expire(
      now,
      (sse) => this.stream.positionOf({ sse }),
      (sse) => this.stream.thinned.finish(sse),
      this.stream.epoch,
    );
    countClosed("expired", expired.length + sseExpired);
    if (hub.size > 0 && now >= this.nextHeartbeat) {
      hub.heartbeat();
      this.nextHeartbeat = 0;
    }
    return Math.min(earliest, hub.earliestExpiry() ?? Number.POSITIVE_INFINITY);
  }

  /**
   * Its last frame says where it is and why it ends (packed sockets get it in an array, like every
   * frame), then 4001 with that reason (token expired, session revoked). Frames held for packed
   * sockets must have been flushed first.
   */
  endSocket(ws: WebSocket, reason: string): void {
    // A thinned subscriber hears what it skipped first: its position counts those as passed.
    this.stream.thinned.finish(ws);
    const text = expiredFrame(this.stream.positionOf({ ws }), this.stream.epoch, reason);
    try {
      ws.send(this.subs.isBatched(ws) ? `[${text}]` : text);
    } catch {
      // already gone: the close below is all that is left
    }
    this.subs.closeSocket(ws, TOKEN_EXPIRED_CLOSE, reason);
  }

  /** Ends, with `event: expired` and `reason`, the SSE streams of the sessions in `sids`; answers how many. */
  endStreams(sids: ReadonlySet<string>, reason: string): number {
    return this.subs.hub.revoke(
      sids,
      reason,
      (sse) => this.stream.positionOf({ sse }),
      (sse) => this.stream.thinned.finish(sse),
      this.stream.epoch,
    );
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
