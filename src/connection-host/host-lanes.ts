/**
 * A connection host's lanes (./lane.ts), one per channel its connections hold: made for a subscribe
 * or for a channel's call, forgotten when the channel says leave, and bounded by their room
 * (./lane-room.ts), which the host's directory hears as load.
 */
import { pusherName } from "../wire/pusher/names";
import { HostLane, type LaneOwner } from "./lane";
import { LaneRoom } from "./lane-room";
import type { LaneRow } from "./schema";

/** What the lanes need of their host. */
export interface LanesHost {
  /** What each lane needs of the host. */
  readonly owner: LaneOwner;
  /** Most connections the host holds (`RELAY_CAPACITY`): its lanes' load is a share of it. */
  capacity(): number;
  /** The connections its lanes count as changed: its directory hears it. */
  loadChanged(): void;
  /** A lane left: its row goes too. */
  deleteRow(key: string): void;
}

export class HostLanes {
  private readonly lanes = new Map<string, HostLane>();
  /** How many lanes the host may keep (./lane-room.ts). */
  readonly room = new LaneRoom(this.lanes);
  /** The connections its lanes count as, as its directory last heard or will hear. */
  private heard = 0;

  constructor(private readonly host: LanesHost) {}

  get size(): number {
    return this.lanes.size;
  }

  /** The connections the lanes count as in the host's directory. */
  get load(): number {
    return this.heard;
  }

  get(key: string): HostLane | undefined {
    return this.lanes.get(key);
  }

  values(): IterableIterator<HostLane> {
    return this.lanes.values();
  }

  /** The lane of channel `key` (Pusher name `name`), made when the host has none. */
  of(key: string, name: string): HostLane {
    let lane = this.lanes.get(key);
    if (!lane) {
      lane = new HostLane(key, name, this.host.owner);
      this.lanes.set(key, lane);
      this.room.opened(key);
    }
    return lane;
  }

  /**
   * The lane a subscribe joins, made when the host has none; the directory hears the load it adds. (A
   * lane a channel's stray call makes is counted when it leaves: it goes again at once.)
   */
  forSubscribe(key: string, name: string): HostLane {
    const lane = this.of(key, name);
    this.measure();
    return lane;
  }

  /** The channel said leave: the lane is forgotten, row and all. False: not one of its lanes now. */
  leave(lane: HostLane): boolean {
    if (this.lanes.get(lane.key) !== lane) return false;
    this.lanes.delete(lane.key);
    this.room.closed(lane.key);
    this.host.deleteRow(lane.key);
    this.measure();
    return true;
  }

  /**
   * A connection closed for slowness: the channel of each of its `keys` counts it in its
   * `slow_consumers_closed`, as it counts a relay's.
   */
  closedSlow(ws: WebSocket, keys: Iterable<string>): void {
    for (const key of keys) {
      const lane = this.lanes.get(key);
      if (lane?.subs.has(ws)) lane.reporter.tellSlow();
    }
  }

  /**
   * After a restart or a wake: the lanes its rows kept, each with its last seq and the count its
   * channel last heard. Answers the latest generation among them.
   */
  restoreRows(rows: readonly LaneRow[]): number {
    let generation = 0;
    for (const l of rows) {
      const lane = this.of(l.channel, pusherName(l.channel) ?? l.channel);
      lane.lastSeq = l.last_seq;
      lane.seq.recovered(l.last_seq, l.generation, null);
      lane.reporter.reported = { websockets: l.reported, sse: 0 };
      generation = Math.max(generation, l.generation);
    }
    return generation;
  }

  /**
   * Then, with their subscriptions back: each lane whose count differs from what its channel last
   * heard reports. The lanes are those the directory heard of before the host slept: no report.
   */
  restored(): void {
    for (const lane of this.lanes.values()) {
      if (lane.subs.size !== lane.reporter.reported.websockets) lane.reporter.changed();
    }
    this.heard = this.room.load(this.host.capacity());
  }

  private measure(): void {
    const load = this.room.load(this.host.capacity());
    if (load === this.heard) return;
    this.heard = load;
    this.host.loadChanged();
  }
}
