/**
 * A connection host's memory bound (docs/operations.md, "The Pusher door: how it scales"): one
 * connection more than {@link SUBSCRIBER_MAX_BEHIND_BYTES} behind is closed, and while the bytes
 * waiting on all its connections together exceed {@link RELAY_MAX_BUFFERED_BYTES} the most behind are
 * closed first — the relay's bound (src/relay/memory.ts) for sockets spread over many lanes.
 *
 * A socket's reading is taken when the host sends to it, and a lane sends only to its own sockets: the
 * figure kept for a socket on a quiet lane is as old as that lane's last batch, and it only shrinks
 * since (the socket drains). So a total past the cap is read again, socket by socket, before anyone
 * is closed: a connection is never closed for bytes it no longer holds.
 */

import { RELAY_MAX_BUFFERED_BYTES, SUBSCRIBER_MAX_BEHIND_BYTES } from "../relay/bounds";

/** What the bound reads of a socket. */
export type BackloggedSocket = Pick<WebSocket, "bufferedAmount" | "readyState">;

/** What closes a connection as slow (4100, counted as `slow`): the host. */
export interface SlowConnectionCloser<S> {
  closeSlow(ws: S, reason: string): void;
}

/** One connection more than 1 MiB behind. */
export const BEHIND_REASON = "slow consumer: over 1 MiB unread; reconnect";
/** The host's memory for all its connections is full: this one was the most behind. */
export const HOST_MEMORY_REASON = "slow consumer: host memory full, this one most behind";

const OPEN = 1;

export class HostBacklog<S extends BackloggedSocket = WebSocket> {
  /** Each socket's bytes waiting, as last read (only sockets with some). */
  private readonly bytes = new Map<S, number>();
  private sum = 0;

  constructor(
    private readonly closer: SlowConnectionCloser<S>,
    private readonly maxBehind = SUBSCRIBER_MAX_BEHIND_BYTES,
    private readonly maxTotal = RELAY_MAX_BUFFERED_BYTES,
  ) {}

  /** The bytes waiting on all its sockets, as last read. */
  get total(): number {
    return this.sum;
  }

  /** `ws` was just sent to: its reading replaces the last, and the bounds are held. */
  sent(ws: S): void {
    const bytes = ws.bufferedAmount;
    if (bytes > this.maxBehind) {
      this.forget(ws);
      this.closer.closeSlow(ws, BEHIND_REASON);
      return;
    }
    this.set(ws, bytes);
    if (this.sum <= this.maxTotal) return;
    // Past the cap by readings that may be stale: every socket read again, the closed ones dropped.
    for (const s of [...this.bytes.keys()]) this.set(s, s.readyState === OPEN ? s.bufferedAmount : 0);
    if (this.sum <= this.maxTotal) return;
    for (const [s] of [...this.bytes].sort((x, y) => y[1] - x[1])) {
      if (this.sum <= this.maxTotal) break;
      this.forget(s);
      this.closer.closeSlow(s, HOST_MEMORY_REASON);
    }
  }

  /** `ws` closed: its bytes no longer count. */
  forget(ws: S): void {
    this.set(ws, 0);
  }

  private set(ws: S, bytes: number): void {
    this.sum += bytes - (this.bytes.get(ws) ?? 0);
    if (bytes > 0) this.bytes.set(ws, bytes);
    else this.bytes.delete(ws);
  }
}
