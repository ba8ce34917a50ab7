/**
 * How many channels one connection host serves (docs/operations.md, "The Pusher door: how it
 * scales"). A connection may hold 100 channels and a host `RELAY_CAPACITY` connections, so without a
 * bound of its own a host of 1,000 connections on distinct channels would keep 100,000 lanes: at
 * about 2.7 KB of memory each (./lane.ts, measured with one subscription), past the isolate's 128 MB.
 *
 * Two parts:
 * - a subscribe that would open a lane past {@link HOST_MAX_LANES} is refused (503, counted as
 *   `host_full`); one to a channel the host already serves always fits, and subscribes still on their
 *   way to a new lane hold their room, so concurrent ones cannot overfill the host;
 * - the host's directory hears the lanes as load: a host whose lanes take the share of
 *   {@link HOST_MAX_LANES} that its connections take of its capacity is full to the directory, which
 *   then places new connections on another host. A connection refused here gets its room back there
 *   by reconnecting.
 */

/** Most lanes (channels) one connection host keeps: 10 per connection of a host of 1,000. */
export const HOST_MAX_LANES = 10_000;

export class LaneRoom {
  /** Channel keys with subscribes on their way to a lane the host does not have yet, and how many. */
  private readonly opening = new Map<string, number>();

  constructor(
    /** The host's lanes, by channel key. */
    private readonly lanes: { has(key: string): boolean; readonly size: number },
    /** Most lanes: {@link HOST_MAX_LANES}, lower only where a test reaches the bound. */
    public max = HOST_MAX_LANES,
  ) {}

  /** Lanes open and lanes on their way. */
  get used(): number {
    let used = this.lanes.size;
    for (const key of this.opening.keys()) if (!this.lanes.has(key)) used++;
    return used;
  }

  /**
   * A subscribe to `key` takes its room: true when the host serves the channel, a subscribe to it is
   * already on its way, or one more lane fits; each true needs its {@link release}.
   */
  take(key: string): boolean {
    const n = this.opening.get(key);
    if (n === undefined && !this.lanes.has(key) && this.used >= this.max) return false;
    this.opening.set(key, (n ?? 0) + 1);
    return true;
  }

  /** The subscribe that took room for `key` joined its lane or was refused. */
  release(key: string): void {
    const n = this.opening.get(key) ?? 0;
    if (n <= 1) this.opening.delete(key);
    else this.opening.set(key, n - 1);
  }

  /**
   * The connections the lanes count as, for a host of `capacity` connections: the same share of it
   * as the lanes take of {@link max}.
   */
  load(capacity: number): number {
    return Math.ceil((this.used * capacity) / this.max);
  }
}
