/**
 * Where a connection host keeps each lane's last sent seq (./lane.ts, `lastSeq`) between batches: in
 * the attachment of one connection subscribed to the lane (its anchor), as a relay keeps its own
 * (src/relay/seq-keeper.ts says why the sockets' lifetime is the one that matters), instead of the
 * lane's row with every batch — a storage write per batch per lane, which also holds the batch's
 * sends until it is confirmed.
 *
 * What differs from a relay: a host serves many lanes on the same sockets, and an attachment holds at
 * most 2 KiB, so a connection anchors lanes only while their keys fit its room (./connections.ts,
 * `SEQ_ROOM_BYTES`). A lane none of whose first {@link ANCHOR_TRIES} connections has room keeps its
 * seq in its row, written with every batch as before. Each write, to an attachment or to the row,
 * carries a generation (the clock, and past the last one), so after hibernation the latest wins: a
 * row written after its lane lost its anchor, or an anchor that closed and still lingers in CLOSING,
 * never brings back an older seq.
 *
 * When the anchor unsubscribes or closes, its entry goes and another connection takes the seq in the
 * same event (a closing socket stays listed until its close event has run).
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
}

export class LaneSeq {
  /** The connection whose attachment holds the seq; null: the row holds it (or nothing needs to). */
  private anchor: WebSocket | null = null;
  /** What was last written, and its generation: generations only grow. */
  private written: { seq: number; generation: number } | null = null;

  constructor(
    private readonly key: string,
    private readonly holders: SeqHolders,
  ) {}

  /** The generation of the last write (the row's, when the row is written now). */
  get generation(): number {
    return this.written?.generation ?? 0;
  }

  /** A new generation for a write of `seq` (the row's, say). */
  stamp(seq: number): number {
    const generation = Math.max(Date.now(), this.generation + 1);
    this.written = { seq, generation };
    return generation;
  }

  /**
   * Keeps `seq` where it outlives the lane's memory: nothing when it is unchanged and still held where
   * it was written (an anchor that is open and one of `subs`, or the row); else in the anchor's
   * attachment, or another connection's with room, or the row.
   */
  keep(seq: number, subs: ReadonlyMap<WebSocket, unknown>): void {
    const anchor = this.anchor && this.anchor.readyState === OPEN && subs.has(this.anchor) ? this.anchor : null;
    // Unchanged, and where it was written still holds it (its anchor, or the row).
    if (this.written?.seq === seq && (anchor || !this.anchor)) return;
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
   * connection (or the row) takes `seq`.
   */
  left(ws: WebSocket, seq: number | null, subs: ReadonlyMap<WebSocket, unknown>): void {
    if (ws !== this.anchor) return;
    // keep() sees its anchor gone, writes the seq elsewhere and takes it off `ws`.
    if (seq !== null && subs.size > 0) {
      this.keep(seq, subs);
      return;
    }
    this.holders.dropSeq(ws, this.key);
    this.anchor = null;
  }

  /** After a wake: the latest write found (the row's, or an attachment's on `ws`). */
  recovered(seq: number, generation: number, ws: WebSocket | null): void {
    this.written = { seq, generation };
    this.anchor = ws;
  }
}
