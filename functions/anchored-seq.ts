/**
 * A last sent seq kept with the sockets it protects: in the attachment of one of them (its anchor),
 * not in storage with every batch. A relay keeps its stream's seq this way (src/relay/seq-keeper.ts
 * says why the sockets' lifetime is the one that matters), and a connection host each lane's
 * (src/connection-host/lane-seq.ts). What differs between the two is where a seq may go, which
 * {@link SeqHolders} decides: for a relay any open socket, and nowhere when none is open; for a lane
 * one of its connections with room in its attachment, else the lane's row.
 *
 * A write happens only when the seq moved or its anchor can no longer hold it. Each write carries a
 * generation past every earlier one of its host, so after hibernation the latest write wins among
 * those found, also when the seq moved back (a channel that started its numbering again) or an old
 * anchor lingers in CLOSING. When the anchor changes, the old one is told to drop its entry (a lane's
 * connection stays open for other lanes; a relay's old anchor is closing, and the later generation
 * outranks what it holds).
 */

/** Where a seq may be kept: the sockets (`S`) that may hold it, how to write it, and what else holds it. */
export interface SeqHolders<S> {
  /** Whether the anchor `s` can still hold the seq: open, and (for a lane) still subscribed to it. */
  holds(s: S): boolean;
  /** The sockets that may hold the seq (a lane's: its subscribers), asked in order when the anchor cannot. */
  candidates(): Iterable<S>;
  /**
   * Whether `s`, one of {@link candidates}, can hold the seq now: open. What makes it a candidate is
   * not asked again, as {@link holds} must for an anchor (a lane's may have left it).
   */
  isOpen(s: S): boolean;
  /** Most sockets asked (among those {@link isOpen}) before {@link fallback}. */
  readonly tries: number;
  /** Writes `seq` into the attachment of `s`: false when it has no room or cannot be written. */
  write(s: S, seq: number, generation: number): boolean;
  /** Takes the seq off `s`, which no longer holds it. */
  drop(s: S): void;
  /** No socket took `seq`: keeps it elsewhere and says true (a lane's row), or false (nothing does). */
  fallback(seq: number, generation: number): boolean;
  /** A generation past every one its host has written or found (the clock, or one more than the last). */
  nextGeneration(): number;
}

export class AnchoredSeq<S> {
  /** The socket whose attachment holds the seq; null: the fallback holds it, or nothing does. */
  private anchor: S | null = null;
  /**
   * The seq held where it was last written (the anchor, or with none the fallback); null: nowhere, or
   * a write that did not complete (the next {@link keep} writes it again).
   */
  private held: number | null = null;
  /** The generation of the last write, or of the one found after a wake. */
  private lastGeneration = 0;

  constructor(private readonly holders: SeqHolders<S>) {}

  /** The generation of the last write, or of the one found after a wake. */
  get generation(): number {
    return this.lastGeneration;
  }

  /** A new generation for a write of `seq` made outside {@link keep} (a lane's row, with its counts). */
  stamp(seq: number): number {
    this.lastGeneration = this.holders.nextGeneration();
    this.held = seq;
    return this.lastGeneration;
  }

  /**
   * Keeps `seq` where it outlives the host's memory: nothing when it is unchanged and still held where
   * it was written; else in the anchor's attachment, or another socket's, or with the fallback.
   */
  keep(seq: number): void {
    const anchor = this.anchor !== null && this.holders.holds(this.anchor) ? this.anchor : null;
    if (this.held === seq && (anchor !== null || this.anchor === null)) return;
    // Held only once a write has landed: a write or fallback that throws leaves it to the next keep.
    this.held = null;
    const generation = this.holders.nextGeneration();
    this.lastGeneration = generation;
    if (anchor !== null && this.holders.write(anchor, seq, generation)) {
      this.held = seq;
      return;
    }
    let tries = 0;
    for (const s of this.holders.candidates()) {
      if (tries >= this.holders.tries) break;
      if (s === anchor || !this.holders.isOpen(s)) continue;
      tries++;
      if (!this.holders.write(s, seq, generation)) continue;
      if (this.anchor !== null && this.anchor !== s) this.holders.drop(this.anchor);
      this.anchor = s;
      this.held = seq;
      return;
    }
    if (this.anchor !== null) this.holders.drop(this.anchor);
    this.anchor = null;
    if (this.holders.fallback(seq, generation)) this.held = seq;
  }

  /** Whether `s` holds the seq. */
  anchoredOn(s: S): boolean {
    return s === this.anchor;
  }

  /** Nothing needs the seq kept any more (no socket is left to protect): `s`'s entry goes, if it is the anchor. */
  release(s: S): void {
    if (s !== this.anchor) return;
    this.holders.drop(s);
    this.anchor = null;
    this.held = null;
  }

  /** No socket holds the seq any more (the relay left its channel): the next {@link keep} writes it. */
  reset(): void {
    this.anchor = null;
    this.held = null;
  }

  /** After a wake: the latest write found, on `anchor` (null: with the fallback). */
  recovered(seq: number, generation: number, anchor: S | null): void {
    this.held = seq;
    this.lastGeneration = generation;
    this.anchor = anchor;
  }
}
