/**
 * Answers of reads shared for a moment inside one isolate (docs/api.md, "Bounds": reads cannot
 * starve a channel): however many readers ask for the same thing within `ttlMs`, the backend is asked
 * once, and every answer is at most `ttlMs` old, counted from when that ask began. Nothing here checks
 * who may read: the caller does that for every request before it asks, and keys by what it reads.
 *
 * Single flight, the workerd way (functions/waiting.ts): a request that finds an ask in flight never
 * awaits another request's promise; it checks for the answer on timers of its own for up to
 * `patienceMs`, then asks for itself (the request that asked was cut off, or the backend is slow).
 * A failed ask is not kept: the next request asks again.
 *
 * Bounded by entries and by bytes ({@link BoundedMap}): keys come from outsiders' requests, and one
 * answer may be megabytes. An answer larger than the whole budget is answered, never kept.
 *
 * Platform-neutral: the clock is an argument.
 */
import { BoundedMap } from "./bounded-map";
import { pollUntil } from "./waiting";

export interface ReadCacheOptions<V> {
  /** How long an answer is shared, counted from when its ask began, in ms. */
  ttlMs: number;
  /** Most answers kept. */
  maxEntries: number;
  /** Most bytes of answers kept (as `sizeOf` counts them). */
  maxBytes: number;
  sizeOf: (value: V) => number;
  /** How long a request waits for another's ask before asking itself, in ms. */
  patienceMs: number;
  /** Clock in epoch ms. Default `Date.now`. */
  now?: () => number;
}

interface Entry<V> {
  /** Set once the ask answered; null while in flight. */
  value: V | null;
  /** The ask failed: joiners ask for themselves. */
  failed: boolean;
  /** When the ask began: the answer is shared until `at + ttlMs`. */
  at: number;
  /** Which ask it is (the count of asks when it began, itself included). */
  number: number;
  /** Estimated bytes, fixed once answered (the map's byte count reads it). */
  bytes: number;
}

export class ReadCache<V> {
  private readonly entries: BoundedMap<string, Entry<V>>;
  private readonly now: () => number;
  /** Asks made to the backend (for tests and benchmarks). */
  asks = 0;

  constructor(private readonly opts: ReadCacheOptions<V>) {
    this.now = opts.now ?? Date.now;
    this.entries = new BoundedMap<string, Entry<V>>(Math.max(1, opts.maxEntries), {
      max: opts.maxBytes,
      of: (_key, e) => e.bytes,
    });
  }

  /** The answer for `key`: shared while fresh, else from `ask` (one ask per key at a time). */
  async get(key: string, ask: () => Promise<V>): Promise<V> {
    const hit = this.entries.get(key);
    if (hit && this.now() - hit.at < this.opts.ttlMs) {
      const shared = await this.answerOf(hit);
      if (shared !== null) return shared;
    }
    return this.ask(key, ask);
  }

  /**
   * The answer for `key` from an ask that begins after this call: for a reader that must see
   * everything that happened before it arrived, which an answer up to `ttlMs` old may not hold. Such
   * asks of one key begin at least `spacingMs` apart, so readers who need them cost the backend at
   * most one ask per `spacingMs` however many they are: each waits, on its own timers, for the next
   * one and shares it. The answer is then shared with {@link get}'s readers as any other.
   */
  async getFresh(key: string, spacingMs: number, ask: () => Promise<V>): Promise<V> {
    const after = this.asks;
    for (;;) {
      const hit = this.entries.get(key);
      if (!hit || hit.failed) return this.ask(key, ask);
      if (hit.number > after) return (await this.answerOf(hit)) ?? this.ask(key, ask);
      const wait = hit.at + spacingMs - this.now();
      // Another reader may ask meanwhile: this one then shares that ask. If none does, it asks itself.
      if (wait > 0 && (await pollUntil(() => this.entries.peek(key) !== hit, wait))) continue;
      return this.ask(key, ask);
    }
  }

  /**
   * `hit`'s answer, waiting for it on this request's own timers while its ask is in flight (at most
   * `patienceMs`); null when it failed or did not answer in time, and the reader asks itself.
   */
  private async answerOf(hit: Entry<V>): Promise<V | null> {
    if (hit.value !== null) return hit.value;
    if (hit.failed) return null;
    await pollUntil(() => hit.value !== null || hit.failed, this.opts.patienceMs);
    return hit.value;
  }

  /** Forgets every answer (a test hook; the TTL does it otherwise). */
  clear(): void {
    this.entries.clear();
  }

  private async ask(key: string, ask: () => Promise<V>): Promise<V> {
    this.asks++;
    const entry: Entry<V> = { value: null, failed: false, at: this.now(), number: this.asks, bytes: 0 };
    if (this.opts.ttlMs > 0) this.entries.set(key, entry);
    let value: V;
    try {
      value = await ask();
    } catch (e) {
      entry.failed = true;
      if (this.entries.peek(key) === entry) this.entries.delete(key);
      throw e;
    }
    entry.value = value;
    // Re-set with its size, so the byte bound counts it (it may not fit, and is then not kept).
    if (this.entries.peek(key) === entry) {
      this.entries.delete(key);
      entry.bytes = this.opts.sizeOf(value);
      this.entries.set(key, entry);
    }
    return value;
  }
}
