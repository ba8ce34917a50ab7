/**
 * The subscribers a relay thins (docs/api.md, "Each reader's rate"; "Slow subscribers"): one
 * {@link Reader} per subscriber with a `max_rate` or slowed for reading too slowly, kept beside its
 * socket — a subscriber without one takes every message, as it always did, at no cost of this. Also
 * what they share: the channel's rules (conflation, summary keys), the rate of messages the relay is
 * offered (what a slow subscriber is "taking"), the one timer for held messages, summaries and count
 * reports, and the counts the relay reports to its channel and to `/metrics`.
 *
 * **The timer** is a `setTimeout` on the relay, not its alarm: while one is pending the runtime does
 * not hibernate the relay, so skip counts and held messages (in memory) live until they are sent.
 * With nothing pending the relay may hibernate; what a WebSocket subscriber's reader must keep then
 * (its `max_rate`, its thinning for slowness) is in the socket's attachment (./subscribers.ts), and
 * its bucket is full again by the time it wakes.
 */
import { splitShardKey } from "../../functions/shard-key";
import { READERS_SKIPPED_SERIES, readersThinnedSeries } from "../metrics/series";
import { conflationFor, summaryFor } from "../settings/rules";
import type { Settings } from "../settings/settings";
import { parseChannelName } from "../wire/channel-names";
import type { LiveFrame } from "../wire/frame-text";
import { type FrameKeys, Reader, type ReaderShared } from "./reader";
import { FrameKeyReader } from "./reader-keys";
import type { ReaderRate } from "./reader-rate";
import type { Slowness } from "./slowness";
import type { SseClient } from "./sse-hub";

/** A subscriber as readers key it: its WebSocket or its SSE stream. */
export type ReaderSub = WebSocket | SseClient;

/** How often (at most) a relay tells its channel and `/metrics` what its readers skipped. */
export const READERS_REPORT_MS = 5_000;

/** What the readers need of their relay. */
export interface ReadersRelay {
  /** The relay's clock (epoch ms; a test gives its own). */
  now(): number;
  /** `SUMMARY_INTERVAL` and the rules, as this relay's configuration says. */
  settings(): Settings;
  /** The channel's object key, once the relay has one. */
  channelKey(): string | null;
  /** Counts changed: report them to the channel (coalesced by the reporter). */
  report(): void;
  /** Counts for `/metrics` (series name → delta). */
  metrics(deltas: Record<string, number>): void;
  /** The timer fired: release held messages, send due summaries (src/relay/stream.ts). */
  due(now: number): void;
  /** A WebSocket's thinning for slowness changed: kept in its attachment for after hibernation. */
  keepSlowness(ws: WebSocket, s: Slowness | null): void;
}

export class RelayReaders {
  private readonly readers = new Map<ReaderSub, Reader>();
  private readonly slowedSubs = new Set<ReaderSub>();
  private readonly shared: ReaderShared;
  private timer: ReturnType<typeof setTimeout> | null = null;
  private timerAt = Number.POSITIVE_INFINITY;
  private keys: { key: string; reader: FrameKeyReader } | null = null;
  /** Messages the relay was offered in the current second and the one before (what subscribers are taking). */
  private meter = { second: 0, count: 0, last: 0 };
  /** Skips and thinnings not yet in `/metrics`; whether the channel's view of the counts is stale. */
  private pendingMetrics = { maxRate: 0, slow: 0 };
  private reportedThinned = 0;
  private nextReport = 0;

  constructor(private readonly relay: ReadersRelay) {
    this.shared = { heldBytes: 0, skipped: 0, metered: 0, wake: (at) => this.wake(at) };
  }

  get size(): number {
    return this.readers.size;
  }

  get(sub: ReaderSub): Reader | undefined {
    return this.readers.get(sub);
  }

  entries(): IterableIterator<[ReaderSub, Reader]> {
    return this.readers.entries();
  }

  /** A subscriber that asked for `max_rate` (or comes back from hibernation with one, or slowed). */
  join(sub: ReaderSub, own: ReaderRate | null, slowness: Slowness | null = null, fresh = true): Reader {
    const reader = new Reader(own, this.shared, this.relay.settings().summaryIntervalMs, this.relay.now(), slowness);
    this.readers.set(sub, reader);
    if (slowness) this.slowedSubs.add(sub);
    if (fresh && own) {
      // Counted in /metrics with the next report, which the timer makes sure comes.
      this.pendingMetrics.maxRate++;
      this.wake(this.relay.now() + READERS_REPORT_MS);
    }
    return reader;
  }

  /** The subscriber is gone: what its reader held is let go. */
  forget(sub: ReaderSub): void {
    const reader = this.readers.get(sub);
    if (!reader) return;
    reader.clearHeld();
    this.readers.delete(sub);
    this.slowedSubs.delete(sub);
  }

  /** The keys of a message on this relay's channel (parsed once per message, ./reader-keys.ts). */
  readonly keysOf = (f: LiveFrame): FrameKeys => this.keyReader().keysOf(f);

  /** Its subscribers' summaries name keys (`by_key`): the channel matches a `THROTTLE_SUMMARY` rule. */
  summariesByKey(): boolean {
    return this.keyReader().byKey;
  }

  /** The relay was offered `n` messages at `now`. */
  offered(n: number, now: number): void {
    const second = Math.floor(now / 1000);
    if (second !== this.meter.second) {
      this.meter.last = second === this.meter.second + 1 ? this.meter.count : 0;
      this.meter.second = second;
      this.meter.count = 0;
    }
    this.meter.count += n;
  }

  /** Messages a second the relay is offered now: the last whole second's, or this one's so far. */
  taking(now: number): number {
    this.offered(0, now);
    return Math.max(this.meter.last, this.meter.count, 1);
  }

  /**
   * A subscriber's backlog after a send: thinned (a reader made for it if it had none), lifted a step,
   * or `close` (over the bound at 1/s and not shrinking).
   */
  watch(sub: ReaderSub, bytes: number, now: number): "close" | undefined {
    let reader = this.readers.get(sub);
    if (!reader) {
      if (bytes <= 0) return;
      reader = this.join(sub, null, null, false);
    }
    const wasSlow = reader.slowness !== null;
    const step = reader.observe(bytes, now, this.taking(now));
    if (step === "close") return "close";
    if (step === "changed") {
      if (!wasSlow) this.pendingMetrics.slow++;
      if (reader.slowness) this.slowedSubs.add(sub);
      else this.slowedSubs.delete(sub);
      if ("send" in sub) this.relay.keepSlowness(sub, reader.slowness);
      this.nextReport = Math.min(this.nextReport, now);
      this.wake(now);
    }
    if (reader.idle) this.forget(sub);
  }

  /** Subscribers thinned for slowness: their backlog is looked at after every pass, to lift them. */
  slowed(): ReadonlySet<ReaderSub> {
    return this.slowedSubs;
  }

  /** Open subscribers thinned now (stats' `thinned`). */
  thinned(isOpen: (sub: ReaderSub) => boolean): number {
    let n = 0;
    for (const [sub, r] of this.readers) if (r.thinned && isOpen(sub)) n++;
    return n;
  }

  /** Skips not yet reported to the channel (taken: a failed report gives them back). */
  takeSkipped(): number {
    const n = this.shared.skipped;
    this.shared.skipped = 0;
    return n;
  }

  giveBackSkipped(n: number): void {
    this.shared.skipped += n;
  }

  /**
   * After the timer's pass (and the relay's alarm), with `thinned` subscribers now and the earliest
   * time a reader has something due (`next`): the channel hears the counts when they changed, at most
   * every {@link READERS_REPORT_MS}, and `/metrics` with them; the timer is set for what comes next.
   */
  settle(now: number, thinned: number, next: number): void {
    const changed = thinned !== this.reportedThinned || this.shared.skipped > 0;
    if (changed && now >= this.nextReport) {
      this.nextReport = now + READERS_REPORT_MS;
      this.reportedThinned = thinned;
      this.relay.report();
      this.flushMetrics();
    } else if (changed) next = Math.min(next, this.nextReport);
    this.timerAt = Number.POSITIVE_INFINITY;
    if (this.timer) clearTimeout(this.timer);
    this.timer = null;
    if (next < Number.POSITIVE_INFINITY) this.wake(Math.max(next, now + 1));
  }

  /** Skips counted since the last flush go to `/metrics` with the thinnings that began. */
  private flushMetrics(): void {
    const p = this.pendingMetrics;
    const deltas: Record<string, number> = {};
    if (this.shared.metered > 0) deltas[READERS_SKIPPED_SERIES] = this.shared.metered;
    if (p.maxRate > 0) deltas[readersThinnedSeries("max_rate")] = p.maxRate;
    if (p.slow > 0) deltas[readersThinnedSeries("slow")] = p.slow;
    this.shared.metered = 0;
    this.pendingMetrics = { maxRate: 0, slow: 0 };
    if (Object.keys(deltas).length > 0) this.relay.metrics(deltas);
  }

  /** The timer fires at `at` (or sooner, if already set sooner). */
  wake(at: number): void {
    if (at >= this.timerAt) return;
    if (this.timer) clearTimeout(this.timer);
    this.timerAt = at;
    this.timer = setTimeout(
      () => {
        this.timer = null;
        this.timerAt = Number.POSITIVE_INFINITY;
        this.relay.due(this.relay.now());
      },
      Math.max(0, at - this.relay.now()),
    );
  }

  /** The relay left its channel: nothing is kept. */
  reset(): void {
    for (const r of this.readers.values()) r.clearHeld();
    this.readers.clear();
    this.slowedSubs.clear();
    if (this.timer) clearTimeout(this.timer);
    this.timer = null;
    this.timerAt = Number.POSITIVE_INFINITY;
    this.keys = null;
  }

  private keyReader(): FrameKeyReader {
    const key = this.relay.channelKey() ?? "";
    if (this.keys?.key !== key) {
      let conflate = null;
      let summary = null;
      try {
        const name = parseChannelName(splitShardKey(key).channel);
        conflate = conflationFor(this.relay.settings(), name);
        summary = summaryFor(this.relay.settings(), name);
      } catch {
        // not a channel name (a relay before its first subscriber): no rules
      }
      this.keys = { key, reader: new FrameKeyReader(conflate, summary) };
    }
    return this.keys.reader;
  }
}
