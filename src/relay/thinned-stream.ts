/**
 * The relay's sends to the subscribers it thins (docs/api.md, "Each reader's rate"; "Slow
 * subscribers"), beside its stream (./stream.ts), which hands each of them its share of a pass:
 * each one's {@link Reader} picks what to send now, and the texts are built once per distinct pick —
 * subscribers that share a rate and a phase share one packed text or one SSE chunk, as unthinned
 * ones share the pass's. Also what comes between passes, on the readers' timer: held messages as room
 * comes, subscriber summaries, a slow subscriber's thinning lifted as it drains; a resume's replay
 * within the budget and the byte bound; and a last summary when a subscription ends.
 */
import { topKeys } from "../../functions/drop-summary";
import { SLOW_CONSUMER_CLOSE, SLOW_CONSUMER_REASON } from "../wire/close-codes";
import {
  type LiveFrame,
  packFrames,
  type SideFrame,
  sideSseEvent,
  sseChunk,
  sseEvent,
  subscriberSummaryFrame,
  subscriberSummaryMaxBytes,
  utf8Length,
} from "../wire/frame-text";
import { SUBSCRIBER_MAX_BEHIND_BYTES } from "./bounds";
import type { ChannelForRelay } from "./calls";
import type { Reader } from "./reader";
import { type ReaderSub, type ReadersRelay, RelayReaders } from "./readers";
import { type SendTally, type SideCut, sendTo, tallyWaiting } from "./send-pass";
import { SLOW_STEP_MS } from "./slowness";
import type { SseClient } from "./sse-hub";
import type { RelaySubscribers } from "./subscribers";

/** What the thinned sends need of their relay, besides what its readers need. */
export interface ThinningRelay extends Omit<ReadersRelay, "due"> {
  channel(): Pick<ChannelForRelay, "framesAfter">;
  maxFrameBytes(): number;
  /** Subscribers closed as slow (the count report carries them). */
  slowClosed(n: number): void;
}

/** What one pass builds once and shares: packed texts and SSE chunks by pick. */
export class ThinPass {
  private readonly texts = new Map<string, string[]>();
  private readonly chunks = new Map<string, Uint8Array>();

  packed(frames: readonly LiveFrame[], side: readonly SideFrame[], mask: number, maxBytes: number): string[] {
    const key = `${mask}|${pickKey(frames)}`;
    let texts = this.texts.get(key);
    if (!texts) {
      texts = packFrames(side.length > 0 ? [...frames, ...side] : frames, maxBytes);
      this.texts.set(key, texts);
    }
    return texts;
  }

  chunk(frames: readonly LiveFrame[], side: readonly SideFrame[], mask: number): Uint8Array {
    const key = `${mask}|${pickKey(frames)}`;
    let chunk = this.chunks.get(key);
    if (!chunk) {
      chunk = sseChunk([...frames.map(sseEvent), ...side.map(sideSseEvent)]);
      this.chunks.set(key, chunk);
    }
    return chunk;
  }
}

/** A pick as a key: the seqs it holds (frames of one channel, so a seq names one frame). */
function pickKey(frames: readonly LiveFrame[]): string {
  let key = "";
  for (const f of frames) key += `${f.seq},`;
  return key;
}

export class ThinnedStream {
  readonly readers: RelayReaders;

  constructor(
    private readonly relay: ThinningRelay,
    private readonly subs: RelaySubscribers,
  ) {
    this.readers = new RelayReaders({ ...relay, due: (now) => this.tick(now) });
  }

  /** One WebSocket's share of a pass (`frames` past its floor), packed or not, and its side frames. */
  sendSocket(
    ws: WebSocket,
    reader: Reader,
    frames: readonly LiveFrame[],
    cut: SideCut,
    tally: SendTally,
    pass: ThinPass,
    now: number,
  ): void {
    const out = reader.take(frames, this.readers.keysOf, now);
    const mask = cut.mask(ws);
    const side = cut.frames(mask);
    if (out.length === 0 && side.length === 0) {
      tallyWaiting(ws, tally);
      return;
    }
    if (this.subs.isBatched(ws)) {
      const texts = pass.packed(out, side, mask, this.relay.maxFrameBytes());
      sendTo(ws, tally, () => {
        for (const text of texts) ws.send(text);
      });
    } else {
      sendTo(ws, tally, () => {
        for (const f of out) ws.send(f.text);
        for (const f of side) ws.send(f.text);
      });
    }
  }

  /** One SSE reader's chunk of a pass (`frames` past its floor), or null when it gets nothing. */
  sseChunk(
    client: SseClient,
    reader: Reader,
    frames: readonly LiveFrame[],
    cut: SideCut,
    pass: ThinPass,
    now: number,
  ): Uint8Array | null {
    const out = reader.take(frames, this.readers.keysOf, now);
    const mask = cut.mask(client);
    const side = cut.frames(mask);
    if (out.length === 0 && side.length === 0) return null;
    return pass.chunk(out, side, mask);
  }

  /**
   * After a pass: each subscriber past half the bound, and each one thinned for slowness, is looked
   * at (thinned, lifted a step, or closed as slow: 4008, an SSE stream cut off).
   */
  watchBacklogs(tally: SendTally, now: number): void {
    const seen = new Set<ReaderSub>();
    for (const { sub, bytes } of tally.over) {
      seen.add(sub);
      if (this.readers.watch(sub, bytes, now) === "close") this.closeSlow(sub, SLOW_CONSUMER_REASON, tally);
    }
    for (const sub of [...this.readers.slowed()]) {
      if (seen.has(sub) || !this.isOpen(sub)) continue;
      if (this.readers.watch(sub, this.backlogOf(sub), now) === "close")
        this.closeSlow(sub, SLOW_CONSUMER_REASON, tally);
    }
  }

  /**
   * A joining subscriber's replay (`?after=`) within its budget: history after `floor` up to `upTo`,
   * page by page, each message sent, held or skipped as live ones are. Its rate does not bound its
   * bytes (a burst of 1,000/s is a thousand messages at once), so it is held to the byte bound as an
   * unthinned replay is: a message is offered only while all it could send — itself, and what the
   * reader holds, which a priority message takes along — fits under the bound with what already
   * waits for the subscriber and the last summary its close would send, at the most that can take
   * (the replay's first send goes whatever, so a resume always moves on).
   * Answers true when one did not fit: the caller closes the subscriber as slow, and it resumes after
   * the last message it received. It stops before offering rather than skipping what does not fit, so
   * received + skipped stays exact: every message offered was sent, held or skipped and counted; the
   * ones after it were never offered, and the resume brings them.
   */
  async replay(sub: ReaderSub, reader: Reader, floor: number, upTo: number): Promise<boolean> {
    let after = floor;
    let sent = false;
    const summary = this.summaryRoom(sub);
    while (after < upTo && this.isOpen(sub)) {
      const page = await this.relay.channel().framesAfter(after, upTo, SUBSCRIBER_MAX_BEHIND_BYTES);
      const last = page.frames.at(-1);
      if (!last) return false;
      const now = this.relay.now();
      let room = SUBSCRIBER_MAX_BEHIND_BYTES - this.backlogOf(sub) - summary;
      const out: LiveFrame[] = [];
      for (const f of page.frames) {
        let most = this.bytesTo(sub, f);
        for (const held of reader.held.values()) most += this.bytesTo(sub, held);
        if (sent && most > room) {
          this.send(sub, out, []);
          return true;
        }
        for (const g of reader.take([f], this.readers.keysOf, now)) {
          room -= this.bytesTo(sub, g);
          out.push(g);
          sent = true;
        }
      }
      this.send(sub, out, []);
      after = last.seq;
      if (!page.more) return false;
    }
    return false;
  }

  /**
   * The readers' timer (and the relay's alarm): held messages that have room go out, due summaries,
   * thinned-for-slowness subscribers that drained are lifted a step; then the counts and the timer.
   */
  tick(now: number): void {
    let next = Number.POSITIVE_INFINITY;
    for (const [sub, reader] of [...this.readers.entries()]) {
      if (!this.isOpen(sub)) {
        this.readers.forget(sub);
        continue;
      }
      if (this.joining(sub)) continue; // its replay sends, and it is looked at again once live
      const out = reader.release(now);
      const summary = reader.takeSummary(now);
      const side = summary ? [this.summaryFrame(summary)] : [];
      if (out.length > 0 || side.length > 0) this.send(sub, out, side);
      if (reader.slowness && this.readers.watch(sub, this.backlogOf(sub), now) === "close") {
        this.closeSlow(sub);
        continue;
      }
      if (reader.idle) this.readers.forget(sub);
      else next = Math.min(next, dueOf(reader, now));
    }
    this.readers.settle(now, this.thinned(), next);
  }

  /** Subscribers thinned now (stats' `thinned`). */
  thinned(): number {
    return this.readers.thinned((sub) => this.isOpen(sub));
  }

  /**
   * The subscription ends (its token expired, or it is closed as slow): what it holds counts as
   * skipped, and it gets its last summary now, so received + skipped covers everything it was offered.
   */
  finish(sub: ReaderSub): void {
    const last = this.lastSummary(sub);
    if (last) this.send(sub, [], [last]);
  }

  /** What {@link finish} sends (null: nothing to tell), the reader forgotten. */
  private lastSummary(sub: ReaderSub): SideFrame | null {
    const reader = this.readers.get(sub);
    if (!reader) return null;
    const now = this.relay.now();
    reader.finish(this.readers.keysOf, now);
    const summary = reader.takeSummary(now, true);
    this.readers.forget(sub);
    return summary ? this.summaryFrame(summary) : null;
  }

  private summaryFrame(s: NonNullable<ReturnType<Reader["takeSummary"]>>): SideFrame {
    const key = this.relay.channelKey() ?? "";
    return {
      event: "summary",
      text: subscriberSummaryFrame(key, s.from, s.to, s.skipped, s.byKey ? topKeys(s.byKey) : null),
    };
  }

  /** Frames and side frames to one subscriber outside a pass. */
  private send(sub: ReaderSub, frames: readonly LiveFrame[], side: readonly SideFrame[]): void {
    if (frames.length === 0 && side.length === 0) return;
    if (!("send" in sub)) {
      this.subs.hub.write(sub, sseChunk([...frames.map(sseEvent), ...side.map(sideSseEvent)]));
      return;
    }
    try {
      if (this.subs.isBatched(sub))
        for (const text of packFrames([...frames, ...side], this.relay.maxFrameBytes())) sub.send(text);
      else for (const f of [...frames, ...side]) sub.send(f.text);
    } catch {
      // closed meanwhile
    }
  }

  /**
   * Closes a subscriber as slow — still over the bound at 1/s, or the most behind when its relay's
   * memory is full (`reason`) — counted (in `tally` during a pass): its last summary, then 4008 after
   * what its socket holds. An SSE stream is cut off instead: its backlog is discarded (the bytes it
   * holds are what the close is for) and the summary, written after the discard, is its last event.
   */
  closeSlow(sub: ReaderSub, reason = SLOW_CONSUMER_REASON, tally: SendTally | null = null): void {
    if (tally) tally.slow++;
    else this.relay.slowClosed(1);
    if ("send" in sub) {
      this.finish(sub);
      this.subs.closeSocket(sub, SLOW_CONSUMER_CLOSE, reason);
    } else {
      const last = this.lastSummary(sub);
      this.subs.hub.cut(sub, last ? sseChunk([sideSseEvent(last)]) : undefined);
    }
  }

  private isOpen(sub: ReaderSub): boolean {
    return this.subs.isOpen("send" in sub ? { ws: sub } : { sse: sub });
  }

  private joining(sub: ReaderSub): boolean {
    return "send" in sub ? this.subs.joining.has(sub) : !this.subs.hub.live.has(sub);
  }

  /** The most bytes `f` adds to what waits for `sub`: its SSE event, its text, or its text packed alone. */
  private bytesTo(sub: ReaderSub, f: LiveFrame): number {
    if (!("send" in sub)) return utf8Length(sseEvent(f));
    return utf8Length(f.text) + (this.subs.isBatched(sub) ? 2 : 0);
  }

  /** The most bytes a last summary adds to what waits for `sub`: its SSE event, its text, or packed alone. */
  private summaryRoom(sub: ReaderSub): number {
    const most = subscriberSummaryMaxBytes(this.relay.channelKey() ?? "", this.readers.summariesByKey());
    if (!("send" in sub)) return most + utf8Length(sideSseEvent({ event: "summary", text: "" }));
    return most + (this.subs.isBatched(sub) ? 2 : 0);
  }

  private backlogOf(sub: ReaderSub): number {
    return "send" in sub ? sub.bufferedAmount : this.subs.hub.backlog(sub);
  }
}

/** When a reader next has something to do: a held message's room, its summary, a look at its backlog. */
function dueOf(reader: Reader, now: number): number {
  let at = reader.summaryDue() ?? Number.POSITIVE_INFINITY;
  if (reader.held.size > 0) at = Math.min(at, reader.releaseAt());
  if (reader.slowness) at = Math.min(at, now + SLOW_STEP_MS);
  return at;
}
