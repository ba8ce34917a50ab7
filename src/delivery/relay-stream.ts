/**
 * A relay's stream of messages to its subscribers (docs/api.md, "Relays"): order, repair, replay.
 *
 * **Order and repair.** The relay knows the last seq it sent (`lastSeq`, stored with every batch, so
 * it survives eviction). Every call from the channel carries the channel's head seq; a batch that does
 * not follow `lastSeq` (a call that failed, frames the channel let go, a restart) makes the relay fetch
 * the hole from the channel's history first, so a subscriber never sees seq jump. A hole that history
 * no longer holds (trimmed past `HISTORY_LIMIT`) closes every subscriber with {@link HISTORY_GAP_CLOSE};
 * a hole too big to send ({@link PAGE_MAX_BYTES}) closes them as slow consumers. Either way they
 * resume with `?after=`.
 *
 * **Joining.** A subscriber gets every message after its floor, replayed from the channel's history
 * up to `lastSeq`, then live — in the relay's one lane of work, so nothing between replay and live is
 * skipped or repeated, whichever relay it lands on.
 */
import type { ChannelObject } from "../channel/channel-object";
import { type LiveFrame, sseChunk, sseEvent } from "../channel/frames";
import { boundMemory } from "./relay-memory";
import type { RelayReporter } from "./relay-reporter";
import type { RelaySubscribers, Subscriber } from "./relay-subscribers";
import {
  HISTORY_GAP_CLOSE,
  HISTORY_GAP_REASON,
  PAGE_MAX_BYTES,
  SLOW_CONSUMER_CLOSE,
  SLOW_CONSUMER_REASON,
  SUBSCRIBER_MAX_BEHIND_BYTES,
} from "./subscriber-bounds";

/** What the stream needs of its relay. */
export interface StreamingRelay {
  channel(): DurableObjectStub<ChannelObject>;
  /** Stores `lastSeq` (so it survives eviction). */
  store(): void;
  /** Bytes waiting for all subscribers together before the most behind are closed. */
  maxBufferedBytes(): number;
}

export class RelayStream {
  /** The last seq this relay sent its subscribers, or null when it holds none and knows none. */
  lastSeq: number | null = null;
  /** Deliveries and replays, one at a time in arrival order. */
  private lane: Promise<unknown> = Promise.resolve();

  constructor(
    private readonly relay: StreamingRelay,
    private readonly subs: RelaySubscribers,
    private readonly reporter: RelayReporter,
  ) {}

  /** Runs `task` after every earlier delivery and replay; a failure fails only its own caller. */
  inLane<T>(task: () => Promise<T> | T): Promise<T> {
    const run = this.lane.then(task);
    this.lane = run.catch(() => {});
    return run;
  }

  /**
   * Sends what follows `lastSeq`: `frames`, after the hole before them (or up to `head`) is fetched
   * from the channel's history.
   */
  async apply(frames: LiveFrame[], head: number): Promise<void> {
    const end = Math.max(head, frames.at(-1)?.seq ?? 0);
    let sockets = this.subs.sockets();
    if (sockets.length + this.subs.hub.size === 0) {
      // Nobody to send to: remember where the stream is, and make sure the channel knows we are empty.
      this.lastSeq = Math.max(this.lastSeq ?? 0, end);
      // Always, not only when it last reported subscribers: a relay kept for a slot that then lapsed
      // is told to leave by this report, instead of lingering on the channel's delivery list.
      this.reporter.changed();
      return;
    }
    const last = this.lastSeq ?? 0;
    let fresh = frames.filter((f) => f.seq > last);
    const firstNew = fresh[0]?.seq ?? end + 1;
    if (firstNew > last + 1 && end > last) {
      const gapEnd = firstNew - 1;
      const page = await this.relay.channel().framesAfter(last, gapEnd, PAGE_MAX_BYTES);
      if (page.more) {
        // Too far behind to send in one go: each subscriber would be more than 1 MiB behind.
        this.subs.closeAll(SLOW_CONSUMER_CLOSE, SLOW_CONSUMER_REASON, (n) => this.reporter.slow(n));
        this.advance(end, false);
        return;
      }
      if (page.frames.length !== gapEnd - last || page.frames[0]?.seq !== last + 1) {
        // History no longer holds the hole: nothing newer is sent across it.
        this.subs.closeAll(HISTORY_GAP_CLOSE, HISTORY_GAP_REASON, () => {});
        this.advance(end, false);
        return;
      }
      fresh = [...page.frames, ...fresh];
      sockets = this.subs.sockets(); // subscribers may have come or gone while it waited
    }
    this.sendLive(fresh, sockets);
    this.advance(end, true);
  }

  /**
   * `lastSeq` moves to `seq`; stored (so it survives eviction) when the relay has subscribers — not
   * after it closed them all, since it is about to leave and delete its storage.
   */
  private advance(seq: number, store: boolean): void {
    this.lastSeq = Math.max(this.lastSeq ?? 0, seq);
    this.subs.passFloors(this.lastSeq);
    if (store) this.relay.store();
  }

  /** A joining subscriber's replay: messages after `floor` up to `lastSeq`, then live. */
  async replay(sub: Subscriber, floor: number): Promise<void> {
    if (!this.subs.isOpen(sub)) return;
    const upTo = this.lastSeq ?? 0;
    if (floor < upTo) {
      let page: { frames: LiveFrame[]; more: boolean };
      try {
        page = await this.relay.channel().framesAfter(floor, upTo, SUBSCRIBER_MAX_BEHIND_BYTES);
      } catch (e) {
        console.error("floodgate relay: replay failed", e instanceof Error ? e.message : e);
        this.subs.leave(sub, 1011, "replay failed; reconnect with ?after=<last seq received>");
        return;
      }
      if ("ws" in sub) for (const f of page.frames) sub.ws.send(f.text);
      else if (page.frames.length > 0) this.subs.hub.write(sub.sse, sseChunk(page.frames.map(sseEvent)));
      this.boundMemory();
      if (page.more) {
        // A replay past the byte bound sends what fits, then closes like a slow subscriber.
        this.reporter.slow();
        this.subs.leave(sub, SLOW_CONSUMER_CLOSE, SLOW_CONSUMER_REASON);
        return;
      }
    }
    this.subs.goLive(sub, floor, upTo);
  }

  /** Sends frames to every live subscriber; one that falls 1 MiB behind is closed, never waited for. */
  private sendLive(frames: LiveFrame[], sockets: WebSocket[]): void {
    if (frames.length === 0) return;
    let closed = 0;
    let slow = 0;
    for (const ws of sockets) {
      if (this.subs.joining.has(ws)) continue;
      const floor = this.subs.floors.get(ws);
      try {
        for (const f of frames) if (floor === undefined || f.seq > floor) ws.send(f.text);
        // Unread bytes past the bound: stop sending and close, so one stalled reader can hold at
        // most the bound plus one batch, and never slows the others (sends do not block).
        if (ws.bufferedAmount > SUBSCRIBER_MAX_BEHIND_BYTES) {
          slow++;
          ws.close(SLOW_CONSUMER_CLOSE, SLOW_CONSUMER_REASON);
        }
      } catch {
        // A socket whose send fails is dropped without disturbing the others.
        closed++;
        try {
          ws.close(1011, "send failed");
        } catch {
          // already gone
        }
      }
    }
    const hub = this.subs.hub;
    if (hub.live.size > 0) {
      const chunk = sseChunk(frames.map(sseEvent)); // written to every reader; counted per reader
      const first = frames[0]?.seq ?? 0;
      for (const client of [...hub.live]) {
        const own = client.floor >= first ? sseChunk(frames.filter((f) => f.seq > client.floor).map(sseEvent)) : chunk;
        if (own.byteLength > 0 && !hub.write(client, own)) slow++;
      }
    }
    if (slow > 0) this.reporter.slow(slow);
    if (slow > 0 || closed > 0) this.reporter.changed();
    this.boundMemory();
  }

  private boundMemory(): void {
    boundMemory(this.subs, this.relay.maxBufferedBytes(), () => this.reporter.slow());
  }
}
