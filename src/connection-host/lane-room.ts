/**
 * How many channels one connection host serves (docs/operations.md, "The Pusher door: how it
 * scales"). A connection may hold 100 channels and a host `RELAY_CAPACITY` connections, so without a
 * bound of its own a host of 1,000 connections on distinct channels would keep 100,000 lanes: at
 * about 2.7 KB of memory each (./lane.ts, measured with one subscription), past the isolate's 128 MB.
 *
 * Two parts:
 * - a subscribe that would open a lane past {@link HOST_MAX_LANES} is refused (503, counted as
 *   `host_full`); one to a channel the host already serves fits, and subscribes still on their way to
 *   a new lane hold their room, so concurrent ones cannot overfill the host (one on its way to a lane
 *   that closes meanwhile keeps that lane's room);
 * - the host's directory hears the lanes as load: its lanes count as the same share of its capacity
 *   as they take of {@link HOST_MAX_LANES}, so a host whose lanes are full is full to the directory,
 *   which places new connections on another host, and takes no new connection itself. A connection
 *   refused here gets its room on another host by reconnecting.
 */

/** Most lanes (channels) one connection host keeps: 10 per connection of a host of 1,000. */
export const HOST_MAX_LANES = 10_000;

/** Gives back the room a subscribe took (it joined its lane, or was refused). */
export type LaneRelease = () => void;

export class LaneRoom {
  /** Channel keys with subscribes on their way to their lane, and how many. */
  private readonly opening = new Map<string, number>();
  /** How many of those keys have no lane now: each will take one when its subscribe joins. */
  private pending = 0;

  constructor(
    /** The host's lanes, by channel key; the host tells {@link opened} and {@link closed} of each. */
    private readonly lanes: { has(key: string): boolean; readonly size: number },
    /** Most lanes: {@link HOST_MAX_LANES}, lower only where a test reaches the bound. */
    public max = HOST_MAX_LANES,
  ) {}

  /** Lanes open, and lanes subscribes on their way will open. */
  get used(): number {
    return this.lanes.size + this.pending;
  }

  /** No room for one more lane: a subscribe to a new channel, or a new connection, is refused. */
  get full(): boolean {
    return this.used >= this.max;
  }

  /**
   * A subscribe to `key` takes its room: its release when the host serves the channel, a subscribe to
   * it is already on its way, or one more lane fits; null when none does.
   */
  take(key: string): LaneRelease | null {
    const n = this.opening.get(key) ?? 0;
    if (n === 0 && !this.lanes.has(key)) {
      if (this.full) return null;
      this.pending++;
    }
    this.opening.set(key, n + 1);
    let held = true;
    return () => {
      if (!held) return;
      held = false;
      const left = (this.opening.get(key) ?? 1) - 1;
      if (left > 0) return void this.opening.set(key, left);
      this.opening.delete(key);
      if (!this.lanes.has(key)) this.pending--;
    };
  }

  /** The host opened `key`'s lane (after it is in its lanes). */
  opened(key: string): void {
    if (this.opening.has(key)) this.pending--;
  }

  /**
   * The host closed `key`'s lane (after it left its lanes). A subscribe to it on its way keeps the
   * lane's room, to open it again: nothing else can take that room meanwhile.
   */
  closed(key: string): void {
    if (this.opening.has(key)) this.pending++;
  }

  /**
   * The connections the host's lanes count as, for a host of `capacity` connections: the same share of
   * it as they take of {@link max}, rounded down (a few lanes left empty by a quiet channel do not keep
   * an empty host in its directory). Subscribes on their way are the room's to refuse, not load.
   */
  load(capacity: number): number {
    return Math.floor((Math.min(this.lanes.size, this.max) * capacity) / this.max);
  }
}
