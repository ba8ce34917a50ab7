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

/** Gives back the room a subscribe took (it joined its lane, or was refused). */
export type LaneRelease = () => void;

const NOTHING_HELD: LaneRelease = () => {};

export class LaneRoom {
  /**
   * Channel keys with subscribes on their way to a lane the host did not have when they took room,
   * and how many. Counted whole in {@link used} even once the lane opens, until they are done: at
   * worst the host refuses a little early while a join is in flight, never late, in O(1) a subscribe.
   */
  private readonly opening = new Map<string, number>();

  constructor(
    /** The host's lanes, by channel key. */
    private readonly lanes: { has(key: string): boolean; readonly size: number },
    /** Most lanes: {@link HOST_MAX_LANES}, lower only where a test reaches the bound. */
    public max = HOST_MAX_LANES,
  ) {}

  /** Lanes open and lanes on their way. */
  get used(): number {
    return this.lanes.size + this.opening.size;
  }

  /**
   * A subscribe to `key` takes its room: its release when the host serves the channel, a subscribe to
   * it is already on its way, or one more lane fits; null when none does.
   */
  take(key: string): LaneRelease | null {
    if (this.lanes.has(key)) return NOTHING_HELD;
    const n = this.opening.get(key);
    if (n === undefined && this.used >= this.max) return null;
    this.opening.set(key, (n ?? 0) + 1);
    let held = true;
    return () => {
      if (!held) return;
      held = false;
      const left = (this.opening.get(key) ?? 1) - 1;
      if (left === 0) this.opening.delete(key);
      else this.opening.set(key, left);
    };
  }

  /**
   * The connections the lanes count as, for a host of `capacity` connections: the same share of it
   * as the lanes take of {@link max}.
   */
  load(capacity: number): number {
    return Math.ceil((Math.min(this.used, this.max) * capacity) / this.max);
  }
}
