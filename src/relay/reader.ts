/**
 * One thinned subscriber's stream on its relay (docs/api.md, "Each reader's rate"): a bucket at the
 * subscriber's rate — its own `max_rate`, or the rate its relay slowed it to for reading too slowly,
 * whichever is slower — with a burst of one second's worth. Each message it is offered is delivered
 * when the bucket has room (a priority message always is, taking room when there is some); else, on a
 * `CONFLATE_KEYS` channel, held as the latest of its key (the one it replaces is skipped), or skipped.
 * Held messages go out in seq order, before anything newer, as room comes; a priority message takes
 * the held ones before it along, so delivered messages keep their order. What is skipped is counted
 * for the subscriber's next summary, so that received + skipped is everything it was offered.
 *
 * Pure: no sockets, no clock of its own (every call passes `now`, epoch ms); the relay's readers
 * (./readers.ts) and its stream (./stream.ts) feed it frames and send what it answers.
 */
import { KeyTally } from "../../functions/drop-summary";
import type { LiveFrame } from "../wire/frame-text";
import { utf8Length } from "../wire/frame-text";
import { ReaderBucket } from "./reader-bucket";
import { perSecond, type ReaderRate, slowerThan } from "./reader-rate";
import { type Slowness, slownessStep } from "./slowness";

/** A message's keys, read once per message per relay (./reader-keys.ts). */
export interface FrameKeys {
  /** Its conflation key (`CONFLATE_KEYS`), or null: it is skipped, never held. */
  conflate: string | null;
  /** The key it counts under in a summary's `by_key` (`THROTTLE_SUMMARY`), or null: no `by_key`. */
  summary: string | null;
}

/** What readers of one relay share: what is held in all (bounded), the skips to report, the settings. */
export interface ReaderShared {
  /** Bytes held by every reader together, counted once per reader holding them. */
  heldBytes: number;
  /** Messages skipped since the relay last reported them to its channel, and to `/metrics`. */
  skipped: number;
  metered: number;
  /** Where a reader's summaries and releases are due: the relay's timer is set for it. */
  wake(at: number): void;
}

/** Most keys one reader holds a message for; a message with a new key past it is skipped. */
export const HELD_MAX_KEYS = 64;
/**
 * Most bytes of messages one reader holds; past it a message is skipped instead of held. Room for the
 * largest message at the shipped MAX_MESSAGE_BYTES: a Pusher event's stored body, twice its data
 * (src/wire/pusher/event-meta.ts, pusherBodyMax), in its frame.
 */
export const HELD_MAX_BYTES = 128 * 1024;
/**
 * Most bytes of held messages one relay keeps for all its readers together (a message held by two
 * readers counts twice, so the real figure is at most this): 8 MiB, a quarter of the relay's bound
 * on what waits in sockets. Past it, messages are skipped instead of held.
 */
export const RELAY_HELD_MAX_BYTES = 8 * 1024 * 1024;
/** Keys one reader's summary tally names (past them, counted under "(other)"; a frame names 20). */
const TALLY_MAX_KEYS = 100;

export class Reader {
  /** The rate it slowed to for reading too slowly, and how (./slowness.ts); null: not slowed. */
  slowness: Slowness | null = null;
  /** Held messages by key, in seq order (a replaced key moves to the end: its message is the newest). */
  readonly held = new Map<string, LiveFrame>();
  private heldBytes = 0;
  /** Its bucket, at the rate it is held to now. */
  private readonly bucket: ReaderBucket;
  /** Skipped since the last summary, and when the first of them was (0: none). */
  skipped = 0;
  private from = 0;
  private tally: KeyTally | null = null;

  /**
   * @param own the subscriber's `max_rate`, or null.
   * @param intervalMs `SUMMARY_INTERVAL`: a summary is due this long after the first skip it counts.
   */
  constructor(
    readonly own: ReaderRate | null,
    private readonly shared: ReaderShared,
    private readonly intervalMs: number,
    now: number,
    slowness: Slowness | null = null,
  ) {
    this.slowness = slowness;
    this.bucket = new ReaderBucket(now);
    this.bucket.setRate(this.heldTo());
  }

  /** The rate it is held to now: the slower of its own and its thinning's; null: none (kept for its counts). */
  heldTo(): ReaderRate | null {
    const slow = this.slowness ? { n: this.slowness.rate, perMs: 1000 } : null;
    if (!this.own || !slow) return this.own ?? slow;
    return slowerThan(slow, this.own) ? slow : this.own;
  }

  /** Messages a second it is held to now, or null. */
  rate(): number | null {
    const r = this.heldTo();
    return r ? perSecond(r) : null;
  }

  /** Its stream is thinned now: by its own rate or for slowness (stats' `thinned`). */
  get thinned(): boolean {
    return this.own !== null || this.slowness !== null;
  }

  /** Nothing held, nothing to tell, not thinned: the relay may forget it. */
  get idle(): boolean {
    return !this.thinned && this.held.size === 0 && this.skipped === 0;
  }

  /** Of `frames` (in seq order, all newer than anything offered before), what to send now. */
  take(frames: readonly LiveFrame[], keysOf: (f: LiveFrame) => FrameKeys, now: number): LiveFrame[] {
    this.refill(now);
    const out: LiveFrame[] = [];
    this.drain(out);
    for (const f of frames) {
      if (f.priority) {
        // Always delivered, after the held messages before it (over the budget if need be: order).
        this.drain(out, true);
        this.bucket.take();
        out.push(f);
      } else if (this.held.size === 0 && this.bucket.has()) {
        this.bucket.take();
        out.push(f);
      } else {
        const keys = keysOf(f);
        if (keys.conflate === null || !this.hold(keys.conflate, f, keysOf, now)) this.skip(keys.summary, now);
      }
    }
    if (this.held.size > 0) this.shared.wake(this.releaseAt());
    return out;
  }

  /** Held messages that have room now, in seq order. */
  release(now: number): LiveFrame[] {
    if (this.held.size === 0) return [];
    this.refill(now);
    const out: LiveFrame[] = [];
    this.drain(out);
    if (this.held.size > 0) this.shared.wake(this.releaseAt());
    return out;
  }

  /** When its summary is due (epoch ms), or null: nothing skipped since the last. */
  summaryDue(): number | null {
    return this.skipped > 0 ? this.from + this.intervalMs : null;
  }

  /**
   * Its summary (`from`, `to`, `skipped`, `by_key` when the channel groups summaries) once due at
   * `now`, or with `force` whatever is pending (its subscription ends); null when nothing is.
   * Counting starts again after it.
   */
  takeSummary(now: number, force = false): ReaderSummary | null {
    const due = this.summaryDue();
    if (due === null || (!force && now < due)) return null;
    const summary: ReaderSummary = {
      from: this.from,
      to: Math.max(now, this.from),
      skipped: this.skipped,
      byKey: this.tally ? this.tally.counts : null,
    };
    this.skipped = 0;
    this.from = 0;
    this.tally = null;
    return summary;
  }

  /** Its subscription ends: what it holds will never be sent, so it counts as skipped (then summarised). */
  finish(keysOf: (f: LiveFrame) => FrameKeys, now: number): void {
    for (const f of this.held.values()) this.skip(keysOf(f).summary, now);
    this.clearHeld();
  }

  /**
   * Its socket's backlog (bytes not yet taken) after a send: thinned further, lifted a step, or to be
   * closed (docs/api.md, "Slow subscribers"). `taking`: messages a second it is offered now.
   */
  observe(bytes: number, now: number, taking: number): "same" | "changed" | "close" {
    const before = this.slowness;
    const step = slownessStep(before, bytes, now, Math.floor(Math.min(taking, this.rate() ?? taking)));
    if (step === "close") return "close";
    if (step === before) return "same";
    this.bucket.refill(now);
    this.slowness = step;
    this.bucket.setRate(this.heldTo());
    return "changed";
  }

  private refill(now: number): void {
    this.bucket.refill(now);
  }

  /** When its bucket next has room for one message (epoch ms). */
  releaseAt(): number {
    return this.bucket.readyAt();
  }

  /** Held messages into `out` in seq order while there is room (all of them with `all`). */
  private drain(out: LiveFrame[], all = false): void {
    for (const [key, f] of this.held) {
      if (!all && !this.bucket.has()) return;
      this.bucket.take();
      this.held.delete(key);
      this.release1(f);
      out.push(f);
    }
  }

  /** Holds `f` as the latest of `key` (the one it replaces is skipped); false: no room to hold it. */
  private hold(key: string, f: LiveFrame, keysOf: (f: LiveFrame) => FrameKeys, now: number): boolean {
    const old = this.held.get(key);
    if (old) {
      this.held.delete(key);
      this.release1(old);
      this.skip(keysOf(old).summary, now);
    }
    const bytes = utf8Length(f.text);
    if (
      this.held.size >= HELD_MAX_KEYS ||
      this.heldBytes + bytes > HELD_MAX_BYTES ||
      this.shared.heldBytes + bytes > RELAY_HELD_MAX_BYTES
    ) {
      return false;
    }
    this.held.set(key, f);
    this.heldBytes += bytes;
    this.shared.heldBytes += bytes;
    return true;
  }

  private release1(f: LiveFrame): void {
    const bytes = utf8Length(f.text);
    this.heldBytes -= bytes;
    this.shared.heldBytes -= bytes;
  }

  /** Forgets what it holds (its subscription ended). */
  clearHeld(): void {
    this.shared.heldBytes -= this.heldBytes;
    this.heldBytes = 0;
    this.held.clear();
  }

  private skip(summaryKey: string | null, now: number): void {
    if (this.skipped === 0) {
      this.from = now;
      this.shared.wake(now + this.intervalMs);
    }
    this.skipped++;
    this.shared.skipped++;
    this.shared.metered++;
    // A channel that groups its summaries gives every message a key ("(other)" when it has no value).
    if (summaryKey !== null) {
      this.tally ??= new KeyTally(TALLY_MAX_KEYS);
      this.tally.add(summaryKey);
    }
  }
}

/** What one subscriber skipped in [from, to); `byKey` when the channel groups its summaries. */
export interface ReaderSummary {
  from: number;
  to: number;
  skipped: number;
  byKey: ReadonlyMap<string, number> | null;
}
