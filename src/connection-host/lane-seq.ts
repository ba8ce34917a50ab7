/**
 * Where a connection host keeps each lane's last sent seq (./lane.ts, `lastSeq`) between batches: in
 * the attachment of one connection subscribed to the lane (its anchor), as a relay keeps its own
 * (src/relay/seq-keeper.ts says why the sockets' lifetime is the one that matters), instead of the
 * lane's row with every batch: a storage write per batch per lane, which the lane's answer to its
 * channel waited on.
 *
 * What differs from a relay: a host serves many lanes on the same sockets, and an attachment holds at
 * most 2 KiB, so a connection anchors lanes only while their keys fit its room (./connections.ts,
 * `SEQ_ROOM_BYTES`). A lane none of whose connections asked ({@link ANCHOR_TRIES}) has room keeps its
 * seq in its row, written with every batch as before; the row is also written with each count report
 * the channel takes. Each write, to an attachment or to the row, carries a generation (the clock, and
 * past the host's last one), so after hibernation the latest wins: a row written after its lane lost
 * its anchor, or an anchor that closed and still lingers in CLOSING, never brings back an older seq.
 *
 * When the anchor unsubscribes, closes or fails to join, its entry goes and another connection takes
 * the seq in the same event (a closing socket stays listed until its close event has run).
 */

/** How many of a lane's connections are asked for room before the lane's row takes the seq. */
const ANCHOR_TRIES = 8;

/** `WebSocket.OPEN`. */
const OPEN = 1;

/** What a lane's seq needs of its host. */
export interface SeqHolders {
  /** Writes the seq into the attachment of `ws`: false when it has no room (or is closed). */
  keepSeq(ws: WebSocket, key: string, seq: number, generation: number): boolean;
  /** The seq leaves the attachment of `ws`. */
  dropSeq(ws: WebSocket, key: string): void;
  /** Writes the lane's row: its seq, with a new generation ({@link LaneSeq.stamp}). */
  storeRow(): void;
  /**
   * A generation past every one the host has written or found (the clock, or one more than the last):
   * one counter for the host, so a lane made again never writes one older than a closing socket holds.
   */
  nextGeneration(): number;
}

export class LaneSeq {
  /** The connection whose attachment holds the seq; null: the row holds it (or nothing needs to). */
  private anchor: WebSocket | null = null;
  /** The seq held where it was last written (the anchor, or with none the row); null: nowhere. */
  private held: number | null = null;
  /** The generation of the lane's last write: after a wake, a write found with a later one wins. */
  generation = 0;

  constructor(
    private readonly key: string,
    private readonly holders: SeqHolders,
  ) {}

  /** A new generation for a write of `seq` (the row's, say). */
  stamp(seq: number): number {
    this.generation = this.holders.nextGeneration();
    this.held = seq;
    return this.generation;
  }

  /**
   * Keeps `seq` where it outlives the lane's memory: nothing when it is unchanged and still held where
   * it was written (an anchor that is open and one of `subs`, or the row); else in the anchor's
   * attachment, or another connection's with room, or the row.
   */
  keep(seq: number, subs: ReadonlyMap<WebSocket, unknown>): void {
    const anchor = this.anchor && this.anchor.readyState === OPEN && subs.has(this.anchor) ? this.anchor : null;
    if (this.held === seq && (anchor || !this.anchor)) return;
    const generation = this.stamp(seq);
    if (anchor && this.holders.keepSeq(anchor, this.key, seq, generation)) return;
    let tries = 0;
    for (const ws of subs.keys()) {
      if (tries >= ANCHOR_TRIES) break;
      if (ws === anchor || ws.readyState !== OPEN) continue;
      tries++;
      if (!this.holders.keepSeq(ws, this.key, seq, generation)) continue;
      if (this.anchor && this.anchor !== ws) this.holders.dropSeq(this.anchor, this.key);
      this.anchor = ws;
      return;
    }
    if (this.anchor) this.holders.dropSeq(this.anchor, this.key);
    this.anchor = null;
    this.holders.storeRow();
  }

  /**
   * `ws` leaves the lane (`subs`, already without it): if it held the seq, its entry goes and another
   * connection (or the row) takes `seq`; with no connection left, nothing holds it until the next write.
   */
  left(ws: WebSocket, seq: number | null, subs: ReadonlyMap<WebSocket, unknown>): void {
    if (ws !== this.anchor) return;
    if (seq !== null && subs.size > 0) {
      // keep() sees its anchor gone, writes the seq elsewhere and takes it off `ws`.
      this.keep(seq, subs);
      return;
    }
    this.holders.dropSeq(ws, this.key);
    this.anchor = null;
    this.held = null;
  }

  /** After a wake: the latest write found (the row's, or an attachment's on `ws`). */
  recovered(seq: number, generation: number, ws: WebSocket | null): void {
    this.held = seq;
    this.generation = generation;
    this.anchor = ws;
  }
}
