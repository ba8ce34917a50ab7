/**
 * Where a connection host keeps each lane's last sent seq (./lane.ts, `lastSeq`) between batches: in
 * the attachment of one connection subscribed to the lane (its anchor), as a relay keeps its own
 * (functions/anchored-seq.ts; src/relay/seq-keeper.ts says why the sockets' lifetime is the one
 * that matters), instead of the lane's row with every batch: a storage write per batch per lane,
 * which the lane's answer to its channel waited on.
 *
 * What differs from a relay: a host serves many lanes on the same sockets, and an attachment holds at
 * most 2 KiB, so a connection anchors lanes only while their keys fit its room (./connections.ts,
 * `SEQ_ROOM_BYTES`). A lane none of whose connections asked ({@link ANCHOR_TRIES}) has room keeps its
 * seq in its row, written with every batch as before; the row is also written with each count report
 * the channel takes. Each write, to an attachment or to the row, carries a generation from the host's
 * one counter, so after hibernation the latest wins: a row written after its lane lost its anchor, or
 * an anchor that closed and still lingers in CLOSING, never brings back an older seq.
 *
 * When the anchor unsubscribes, closes or fails to join, another connection takes the seq in the same
 * event and the anchor's entry goes; a closing one's attachment is not rewritten for it (a closing
 * socket stays listed until its close event has run, and the later generation outranks its entry).
 */
import { AnchoredSeq } from "../../functions/anchored-seq";

/** How many of a lane's connections are asked for room before the lane's row takes the seq. */
const ANCHOR_TRIES = 8;

/** `WebSocket.OPEN`. */
const OPEN = 1;

/** What a lane's seq needs of its host. */
export interface LaneSeqHolders {
  /** Writes the seq into the attachment of `ws`: false when it has no room (or is closed). */
  keepSeq(ws: WebSocket, key: string, seq: number, generation: number): boolean;
  /** The seq leaves the attachment of `ws`. */
  dropSeq(ws: WebSocket, key: string): void;
  /** Writes the lane's row with `seq` and `generation` (no connection took it: {@link LaneSeq.keep}). */
  storeRow(seq: number, generation: number): void;
  /**
   * A generation past every one the host has written or found (the clock, or one more than the last):
   * one counter for the host, so a lane made again never writes one older than a closing socket holds.
   */
  nextGeneration(): number;
}

export class LaneSeq {
  private readonly seq: AnchoredSeq<WebSocket>;
  /** The lane's subscribers as of the last call: the connections that may hold its seq. */
  private subs: ReadonlyMap<WebSocket, unknown> = new Map();

  constructor(key: string, holders: LaneSeqHolders) {
    this.seq = new AnchoredSeq<WebSocket>({
      // `subs` is asked of the anchor only (it may have left the lane): each candidate is taken from it.
      holds: (ws) => ws.readyState === OPEN && this.subs.has(ws),
      candidates: () => this.subs.keys(),
      isOpen: (ws) => ws.readyState === OPEN,
      tries: ANCHOR_TRIES,
      write: (ws, seq, generation) => holders.keepSeq(ws, key, seq, generation),
      drop: (ws) => holders.dropSeq(ws, key),
      fallback: (seq, generation) => {
        holders.storeRow(seq, generation);
        return true;
      },
      nextGeneration: () => holders.nextGeneration(),
    });
  }

  /** The generation of the lane's last write, or of the one found after a wake. */
  get generation(): number {
    return this.seq.generation;
  }

  /** A new generation for a write of `seq` to the lane's row. */
  stamp(seq: number): number {
    return this.seq.stamp(seq);
  }

  /**
   * Keeps `seq` where it outlives the lane's memory: nothing when it is unchanged and still held where
   * it was written (an anchor that is open and one of `subs`, or the row); else in the anchor's
   * attachment, or another connection's with room, or the row.
   */
  keep(seq: number, subs: ReadonlyMap<WebSocket, unknown>): void {
    this.subs = subs;
    this.seq.keep(seq);
  }

  /**
   * `ws` leaves the lane (`subs`, already without it): if it held the seq, its entry goes and another
   * connection (or the row) takes `seq`; with no connection left, nothing holds it until the next write.
   */
  left(ws: WebSocket, seq: number | null, subs: ReadonlyMap<WebSocket, unknown>): void {
    if (!this.seq.anchoredOn(ws)) return;
    this.subs = subs;
    // keep() sees its anchor gone (no longer one of `subs`), writes the seq elsewhere and takes it off `ws`.
    if (seq !== null && subs.size > 0) this.seq.keep(seq);
    else this.seq.release(ws);
  }

  /** After a wake: the latest write found (the row's, or an attachment's on `ws`). */
  recovered(seq: number, generation: number, ws: WebSocket | null): void {
    this.seq.recovered(seq, generation, ws);
  }
}
