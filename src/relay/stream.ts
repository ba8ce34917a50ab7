/**
 * A relay's stream of messages to its subscribers (docs/api.md, "Relays"): order, repair, replay.
 *
 * **Order and repair.** The relay knows the last seq it sent (`lastSeq`, kept with every batch on one
 * of its sockets, so it survives hibernation with them: ./seq-keeper.ts). Every call from the channel
 * carries the channel's head seq; a batch that does not follow `lastSeq` (a call that failed, frames
 * the channel let go, a restart) makes the relay fetch
 * the hole from the channel's history first (./gap-repair.ts), so a subscriber never sees seq jump. A
 * hole that history no longer holds (trimmed past `HISTORY_LIMIT`) closes every subscriber with
 * {@link HISTORY_GAP_CLOSE}; a hole too big to send (`PAGE_MAX_BYTES`) closes them as slow consumers.
 * Either way they resume with `?after=`.
 *
 * **Joining.** A subscriber gets every message after its floor, replayed from the channel's history
 * up to `lastSeq`, then live — in the relay's one lane of work, so nothing between replay and live is
 * skipped or repeated, whichever relay it lands on.
 *
 * **Packed frames.** A socket that asked for them (`?batch=1`) gets what one call sends it (a batch,
 * a repair with it, a replay) as JSON arrays of at most {@link FRAME_MAX_BYTES}, joined from the
 * prebuilt texts. With `FRAME_DELAY` > 0 the frames for packed sockets are held (shared by all of
 * them, at most one full frame) until the delay since the first of them ends, then sent as one; the
 * others are sent at once. Held frames wait for the sockets live when they came: a replay sends what
 * is held first, since the joiner's replay already covers it, and floors are not passed until the
 * frames below them have gone out.
 *
 * **Thinned subscribers** (docs/api.md, "Each reader's rate"; "Slow subscribers") — a `max_rate`, or
 * a backlog past half the byte bound — take their share of each pass through src/relay/thinned-stream.ts;
 * a pass without them is what it always was. After a pass, subscribers past half the bound are thinned
 * and thinned ones that drained lifted a step; one still over the bound at 1/s is closed.
 *
 * **Side frames** (summaries, presence: docs/api.md, "Side frames") come with a call after its
 * messages and go to the live subscribers that take them ({@link RelaySubscribers.wantsSide}), packed
 * with the messages for packed sockets (and held with them under `FRAME_DELAY`); they carry no seq,
 * so they never touch order, repair, replay or floors.
 */

import { SerialLane } from "../platform/serial-lane";
import {
  HISTORY_GAP_CLOSE,
  HISTORY_GAP_REASON,
  INTERNAL_CLOSE,
  SLOW_CONSUMER_CLOSE,
  SLOW_CONSUMER_REASON,
} from "../wire/close-codes";
import {
  type LiveFrame,
  packFrames,
  type SideFrame,
  sideSseEvent,
  sseChunk,
  sseEvent,
  utf8Length,
} from "../wire/frame-text";
import { FRAME_MAX_BYTES, SUBSCRIBER_MAX_BEHIND_BYTES } from "./bounds";
import type { ChannelForRelay } from "./calls";
import { countClosed } from "./closes";
import { fillHole, pastLastSent } from "./gap-repair";
import { boundMemory, type SocketBacklog } from "./memory";
import type { RelayReporter } from "./reporter";
import { newTally, PackedOnce, type SendTally, SideCut, sendTo, tallyWaiting } from "./send-pass";
import { THIN_AT_BYTES } from "./slowness";
import type { SseClient } from "./sse-hub";
import { attachment, type RelaySubscribers, type Subscriber } from "./subscribers";
import { type ThinnedStream, ThinPass } from "./thinned-stream";

/** What the stream needs of its relay. */
export interface StreamingRelay {
  channel(): ChannelForRelay;
  /** Keeps `lastSeq` (so it survives hibernation: ./seq-keeper.ts). */
  store(): void;
  /** Bytes waiting for all subscribers together before the most behind are closed. */
  maxBufferedBytes(): number;
  /** `FRAME_DELAY` in ms: how long frames for packed sockets may be held to pack more. */
  frameDelayMs(): number;
  /** Most bytes of one packed frame ({@link FRAME_MAX_BYTES}; a test lowers it). */
  maxFrameBytes(): number;
  /** The relay's clock (epoch ms): thinned subscribers' buckets and steps. */
  now(): number;
}

export class RelayStream {
  /** The last seq this relay sent its subscribers, or null when it holds none and knows none. */
  lastSeq: number | null = null;
  /** The channel's epoch as last heard (a subscribe's slot, a delivery), for expired frames; memory only. */
  epoch: string | undefined;
  /** Deliveries and replays, one at a time in arrival order. */
  private readonly lane = new SerialLane();
  /** Frames held for packed sockets (`FRAME_DELAY` > 0), in seq order, and their bytes. */
  private held: LiveFrame[] = [];
  /** Side frames held with them, sent after them. */
  private heldSide: SideFrame[] = [];
  private heldBytes = 0;
  private heldTimer: ReturnType<typeof setTimeout> | null = null;

  constructor(
    private readonly relay: StreamingRelay,
    private readonly subs: RelaySubscribers,
    private readonly reporter: RelayReporter,
    /** The subscribers it thins, and their sends (src/relay/thinned-stream.ts). */
    readonly thinned: ThinnedStream,
  ) {}

  /** Runs `task` after every earlier delivery and replay; a failure fails only its own caller. */
  inLane<T>(task: () => Promise<T> | T): Promise<T> {
    return this.lane.run(task);
  }

  /**
   * Sends what follows `lastSeq`: `frames`, after the hole before them (or up to `head`) is fetched
   * from the channel's history; then `side`.
   */
  async apply(frames: LiveFrame[], head: number, side: readonly SideFrame[] = []): Promise<void> {
    const end = Math.max(head, frames.at(-1)?.seq ?? 0);
    this.epoch = frames.at(-1)?.epoch ?? this.epoch;
    let sockets = this.subs.sockets();
    if (sockets.length + this.subs.hub.size === 0) {
      // Nobody to send to: remember where the stream is, and make sure the channel knows we are empty.
      this.lastSeq = Math.max(this.lastSeq ?? 0, end);
      // Always, not only when it last reported subscribers: a relay kept for a slot that then lapsed
      // is told to leave by this report, instead of lingering on the channel's delivery list.
      this.reporter.changed();
      return;
    }
    let { fresh, hole } = pastLastSent(frames, this.lastSeq ?? 0, end);
    if (hole) {
      const filled = await fillHole(this.relay.channel(), hole);
      if ("lost" in filled) {
        // Too far behind to send in one go (each subscriber would be more than 1 MiB behind), or
        // history no longer holds the hole: nothing newer is sent across it.
        if (filled.lost === "too-big")
          this.subs.closeAll(SLOW_CONSUMER_CLOSE, SLOW_CONSUMER_REASON, (n) => this.reporter.slow(n));
        else this.subs.closeAll(HISTORY_GAP_CLOSE, HISTORY_GAP_REASON, (n) => countClosed("history_gap", n));
        this.advance(end, false);
        return;
      }
      fresh = [...filled.frames, ...fresh];
      sockets = this.subs.sockets(); // subscribers may have come or gone while it waited
    }
    // Joiners still skipping presence news their state counted: in or out of this call's side frames.
    const alone = this.subs.settlePresence(side);
    this.sendLive(fresh, sockets, side);
    for (const [sub, news] of alone) this.sendSideTo(sub, news);
    this.advance(end, true);
  }

  /**
   * `lastSeq` moves to `seq`; kept (so it survives hibernation) when the relay has subscribers — not
   * after it closed them all, since it is about to leave and delete its storage.
   */
  private advance(seq: number, store: boolean): void {
    this.lastSeq = Math.max(this.lastSeq ?? 0, seq);
    this.passFloors();
    if (store) this.relay.store();
  }

  /** Floors below what was sent to every socket pass; those above held frames wait for their flush. */
  private passFloors(): void {
    const held = this.held[0];
    this.subs.passFloors(held ? held.seq - 1 : (this.lastSeq ?? 0));
  }

  /**
   * A joining subscriber's replay: messages after `floor` up to `lastSeq`, then `first` (its
   * presence `state`, docs/api.md "Presence") when it has one, then live.
   */
  async replay(sub: Subscriber, floor: number, first: SideFrame | null = null): Promise<void> {
    if (!this.subs.isOpen(sub)) return;
    // The replay covers what is held: it goes to those live before this joiner goes live too.
    this.flushHeld();
    const upTo = this.lastSeq ?? 0;
    const to = "ws" in sub ? sub.ws : sub.sse;
    const reader = this.thinned.readers.get(to);
    if (floor < upTo) {
      let page: { frames: LiveFrame[]; more: boolean } = { frames: [], more: false };
      try {
        // A subscriber with a max_rate replays within its budget, page by page, and within the byte bound.
        if (reader) page.more = await this.thinned.replay(to, reader, floor, upTo);
        else page = await this.relay.channel().framesAfter(floor, upTo, SUBSCRIBER_MAX_BEHIND_BYTES);
      } catch (e) {
        console.error("floodgate relay: replay failed", e instanceof Error ? e.message : e);
        countClosed("internal");
        this.subs.leave(sub, INTERNAL_CLOSE, "replay failed; reconnect with ?after=<last seq received>");
        return;
      }
      if ("ws" in sub) {
        if (this.subs.isBatched(sub.ws))
          for (const text of packFrames(page.frames, this.relay.maxFrameBytes())) sub.ws.send(text);
        else for (const f of page.frames) sub.ws.send(f.text);
      } else if (page.frames.length > 0) this.subs.hub.write(sub.sse, sseChunk(page.frames.map(sseEvent)));
      this.boundMemory(); // which may close it: then it is closed and counted already
      if (page.more && this.subs.isOpen(sub)) {
        // A replay past the byte bound sends what fits, then closes like a slow subscriber (a thinned
        // one after its last summary).
        if (reader) this.thinned.finish(to);
        this.reporter.slow();
        this.subs.leave(sub, SLOW_CONSUMER_CLOSE, SLOW_CONSUMER_REASON);
        return;
      }
    }
    if (first && this.subs.isOpen(sub)) {
      this.sendSideTo(to, [first]);
      this.subs.presenceSent(to, first.version ?? 0);
    }
    this.subs.goLive(sub, floor, upTo);
    // What it holds from its replay goes out as room comes.
    if (reader) this.thinned.readers.wake(this.relay.now());
  }

  /** Side frames to one subscriber alone (its presence `state`, the presence news newer than it). */
  private sendSideTo(sub: WebSocket | SseClient, frames: readonly SideFrame[]): void {
    if (!("send" in sub)) {
      this.subs.hub.write(sub, sseChunk(frames.map(sideSseEvent)));
      return;
    }
    try {
      if (this.subs.isBatched(sub)) for (const text of packFrames(frames, this.relay.maxFrameBytes())) sub.send(text);
      else for (const f of frames) sub.send(f.text);
    } catch {
      // closed meanwhile
    }
  }

  /**
   * Sends frames, then side frames, to every live subscriber; one that falls 1 MiB behind is closed,
   * never waited for. Packed sockets get them as packed frames, now or (`FRAME_DELAY` > 0) when the
   * held frames go.
   */
  private sendLive(frames: LiveFrame[], sockets: WebSocket[], side: readonly SideFrame[] = []): void {
    if (frames.length === 0 && side.length === 0) return;
    // `sockets` are all that are open (taken after any await), so the pass reads every backlog.
    const tally = newTally();
    const hold = this.relay.frameDelayMs() > 0;
    const cut = new SideCut(side, this.subs);
    const packed = new PackedOnce(frames, cut, this.relay.maxFrameBytes());
    // Thinned subscribers (src/relay/thinned-stream.ts) take their share; nobody else pays for them.
    const readers = this.thinned.readers;
    const now = this.relay.now();
    readers.offered(frames.length, now);
    const pass = readers.size > 0 ? new ThinPass() : null;
    for (const ws of sockets) {
      if (this.subs.joining.has(ws)) {
        tallyWaiting(ws, tally);
        continue;
      }
      const reader = pass ? readers.get(ws) : undefined;
      if (reader && pass && !(hold && this.subs.isBatched(ws))) {
        this.thinned.sendSocket(ws, reader, this.subs.pastFloor(ws, frames), cut, tally, pass, now);
        continue;
      }
      if (this.subs.isBatched(ws)) {
        if (!hold) this.sendPacked(ws, frames, packed, tally);
        else tallyWaiting(ws, tally);
        continue;
      }
      const floor = this.subs.floors.get(ws);
      const own = cut.framesFor(ws);
      sendTo(ws, tally, () => {
        for (const f of frames) if (floor === undefined || f.seq > floor) ws.send(f.text);
        for (const f of own) ws.send(f.text);
      });
    }
    const hub = this.subs.hub;
    if (hub.live.size > 0) {
      // One chunk per set of side frames, written to every reader that takes it; counted per reader.
      const events = frames.map(sseEvent);
      const shared = new Map<number, Uint8Array>();
      const first = frames[0]?.seq ?? 0;
      for (const client of [...hub.live]) {
        const mask = cut.mask(client);
        const reader = pass ? readers.get(client) : undefined;
        let own: Uint8Array | null;
        if (reader && pass) {
          const mine = client.floor >= first ? frames.filter((f) => f.seq > client.floor) : frames;
          own = this.thinned.sseChunk(client, reader, mine, cut, pass, now);
        } else if (frames.length > 0 && client.floor >= first) {
          const mine = frames.filter((f) => f.seq > client.floor).map(sseEvent);
          own = sseChunk([...mine, ...cut.frames(mask).map(sideSseEvent)]);
        } else {
          own = shared.get(mask) ?? sseChunk([...events, ...cut.frames(mask).map(sideSseEvent)]);
          shared.set(mask, own);
        }
        if (own && own.byteLength > 0) hub.write(client, own);
        const bytes = hub.backlog(client);
        if (bytes > THIN_AT_BYTES) tally.over.push({ sub: client, bytes });
      }
    }
    this.settle(tally);
    if (hold) this.hold(frames, side);
  }

  /** Holds frames for packed sockets; sent when the delay since the first ends, or at once when a frame is full. */
  private hold(frames: LiveFrame[], side: readonly SideFrame[]): void {
    for (const f of frames) {
      this.held.push(f);
      this.heldBytes += utf8Length(f.text);
    }
    for (const f of side) {
      this.heldSide.push(f);
      this.heldBytes += utf8Length(f.text);
    }
    if (this.heldBytes >= this.relay.maxFrameBytes()) {
      this.flushHeld();
      return;
    }
    this.heldTimer ??= setTimeout(() => {
      this.heldTimer = null;
      this.flushHeld();
    }, this.relay.frameDelayMs());
  }

  /**
   * Sends what is held to the packed sockets live now (a joiner is still being replayed to, and its
   * replay covers it). Runs outside the lane: sends are synchronous, and nothing is held while a
   * replay awaits its page, since the replay flushed first and deliveries wait for it.
   */
  flushHeld(): void {
    if (this.heldTimer) clearTimeout(this.heldTimer);
    this.heldTimer = null;
    const frames = this.held;
    const side = this.heldSide;
    if (frames.length === 0 && side.length === 0) return;
    this.held = [];
    this.heldSide = [];
    this.heldBytes = 0;
    const tally = newTally();
    const packed = new PackedOnce(frames, new SideCut(side, this.subs), this.relay.maxFrameBytes());
    const readers = this.thinned.readers;
    const pass = readers.size > 0 ? new ThinPass() : null;
    const now = this.relay.now();
    for (const ws of this.subs.sockets()) {
      const reader = pass ? readers.get(ws) : undefined;
      if (this.subs.joining.has(ws) || !this.subs.isBatched(ws)) tallyWaiting(ws, tally);
      else if (reader && pass)
        this.thinned.sendSocket(ws, reader, this.subs.pastFloor(ws, frames), packed.cut, tally, pass, now);
      else this.sendPacked(ws, frames, packed, tally);
    }
    this.passFloors();
    this.settle(tally);
  }

  /**
   * The last seq a subscriber has been sent or is past (the `seq` of its `expired` frame): one still
   * being replayed to has been sent nothing past its floor; a live one everything up to `lastSeq`
   * (or its floor, when it joined ahead), except frames held for packed sockets — the caller flushes
   * those first ({@link flushHeld}), and a packed socket's position stops below any still held.
   */
  positionOf(sub: Subscriber): number {
    if ("sse" in sub) {
      const live = this.subs.hub.live.has(sub.sse);
      return live ? Math.max(sub.sse.floor, this.lastSeq ?? 0) : sub.sse.floor;
    }
    const ws = sub.ws;
    const floor = attachment(ws)?.floor ?? 0;
    if (this.subs.joining.has(ws)) return floor;
    const ahead = this.subs.floors.get(ws);
    let sent = this.lastSeq ?? 0;
    const held = this.held[0];
    if (held && this.subs.isBatched(ws)) sent = Math.min(sent, held.seq - 1);
    return Math.max(floor, ahead ?? 0, sent);
  }

  /**
   * Packed frames (and the side frames it takes) to one socket: shared by every socket without a
   * floor that takes the same side frames, its own past one.
   */
  private sendPacked(ws: WebSocket, frames: LiveFrame[], packed: PackedOnce, tally: SendTally): void {
    const floor = this.subs.floors.get(ws);
    const first = frames[0]?.seq ?? 0;
    const mask = packed.cut.mask(ws);
    const texts =
      floor === undefined || floor < first
        ? packed.texts(mask)
        : packFrames([...frames.filter((f) => f.seq > floor), ...packed.cut.frames(mask)], this.relay.maxFrameBytes());
    if (texts.length === 0) {
      tallyWaiting(ws, tally);
      return;
    }
    sendTo(ws, tally, () => {
      for (const text of texts) ws.send(text);
    });
  }

  private settle(tally: SendTally): void {
    // Subscribers past half the bound are thinned; thinned ones that drained are lifted a step.
    if (tally.over.length > 0 || this.thinned.readers.slowed().size > 0)
      this.thinned.watchBacklogs(tally, this.relay.now());
    if (tally.slow > 0) this.reporter.slow(tally.slow);
    countClosed("internal", tally.closed); // sends that failed (1011)
    if (tally.slow > 0 || tally.closed > 0) this.reporter.changed();
    this.boundMemory(tally.backlog);
  }

  private boundMemory(sockets?: SocketBacklog): void {
    boundMemory(this.subs, this.relay.maxBufferedBytes(), this.thinned, sockets);
  }
}
