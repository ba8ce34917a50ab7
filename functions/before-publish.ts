/**
 * The before-publish function: decides whether a message on a busy channel is delivered or dropped.
 *
 * docs/api.md, POST /v1/publish, step 2 (the before-publish throttle). The drop rate is read from a key-value store (Workers KV in production): the
 * key `throttleRate:<channel>`, else (for a shard, functions/shard-key.ts) its channel's key, else the
 * global key `throttleRate`; it is parsed as a number and clamped to [0,1]. A missing, non-numeric or unreadable value means the fallback rate. A message is
 * dropped with that probability; the analytics channel is never throttled.
 *
 * Platform-neutral: the store, clock, random source and logger are arguments, so the same code runs
 * in a unit test and in the Worker.
 *
 * Cost: the rate is cached per channel for `cacheMs` (default 1 s) inside one isolate, and concurrent
 * misses share one read, so a busy channel costs at most about two KV reads per second per isolate,
 * not one per message. The price is staleness: a new rate reaches an isolate up to `cacheMs` after KV
 * shows it (on top of KV's own propagation delay, up to about 60 s between locations).
 *
 * A channel with a target also runs a fast loop in its own object (docs/throttling.md, "Two loops"),
 * and the object's answers carry that loop's current rate: {@link DropRateReader.offer} keeps it as
 * the channel's rate in this isolate for {@link CHANNEL_RATE_TTL_MS}, ahead of KV. KV stays the rate
 * an isolate starts from — a cold isolate, or one that has not heard from the channel for that long.
 */

import { BoundedMap } from "./bounded-map";
import { clampRate } from "./sampler";
import { SHARD_KEY_SEPARATOR, splitShardKey } from "./shard-key";
import type { Thinning } from "./thinning";
import { pollUntil } from "./waiting";

/** The part of a key-value store the throttle needs (`KVNamespace` satisfies it). */
export interface RateStore {
  get(key: string): Promise<string | null>;
}

/** Where a rate came from: a KV key, the fallback, or the channel object's fast loop. */
export type RateSource = "channel" | "global" | "fallback" | "fast-loop";

/** Why the fallback rate was used. Each cause is logged once per isolate, not per message. */
export type FallbackCause = "missing" | "non-numeric" | "unreadable";

export interface ResolvedRate {
  /** The drop probability used, in [0,1]. */
  rate: number;
  source: RateSource;
  /** Set when `source` is "fallback". */
  cause?: FallbackCause;
}

export interface DropRateReaderOptions {
  store: RateStore;
  /** Used when the stored value is missing, non-numeric or unreadable. Clamped to [0,1]. */
  fallbackRate: number;
  /** How long a read is reused, in ms. 0 disables the cache. Default 1000. */
  cacheMs?: number;
  /** A read slower than this counts as unreadable, in ms. Default 1000. */
  readTimeoutMs?: number;
  /** Clock in epoch ms. Default `Date.now`. */
  now?: () => number;
  /** Warning sink. Default `console.warn`. */
  log?: (message: string) => void;
}

/**
 * How long a rate from the channel object stands in for KV in one isolate. Every answer from the
 * object (a delivered publish, a drop report) renews it, so it only lapses for an isolate that has
 * not touched the channel for this long; a minute is the Cron sweep's period, after which KV holds the
 * persisted rate. Longer than a fast period on purpose: with many isolates each seeing a message every
 * few seconds, a rate that lapsed between two of them would send each back to KV's older value.
 */
export const CHANNEL_RATE_TTL_MS = 60_000;

/**
 * Channels whose rates one isolate keeps (read from KV, and offered by their objects, each); past it
 * the least recently used channel's rate is read again, so a flood of distinct channel names cannot
 * grow memory or push out the busy channels' rates.
 */
const MAX_CACHED_CHANNELS = 10_000;

export const CHANNEL_RATE_PREFIX = "throttleRate:";
export const GLOBAL_RATE_KEY = "throttleRate";

/** The KV key for a channel's drop rate; `*` names the global key. */
export function rateKey(channel: string): string {
  return channel === "*" ? GLOBAL_RATE_KEY : CHANNEL_RATE_PREFIX + channel;
}

const NUMBER = /^[+-]?(\d+\.?\d*|\.\d+)([eE][+-]?\d+)?$/;

/** Parses a stored rate: a decimal number clamped to [0,1], or null when it is not a number. */
export function parseStoredRate(text: string): number | null {
  const t = text.trim();
  if (!NUMBER.test(t)) return null;
  return clampRate(Number(t));
}

interface CacheEntry {
  /** Set once the read has answered; null while it is in flight (others then join it). */
  value: ResolvedRate | null;
  expires: number;
}

/** Reads and caches drop rates. One instance per isolate. */
export class DropRateReader {
  private readonly store: RateStore;
  private readonly fallbackRate: number;
  private readonly cacheMs: number;
  private readonly readTimeoutMs: number;
  private readonly now: () => number;
  private readonly log: (message: string) => void;
  private readonly cache = new BoundedMap<string, CacheEntry>(MAX_CACHED_CHANNELS);
  private readonly logged = new Set<FallbackCause>();
  /** Rates the channel objects answered with, and until when each stands in for KV. */
  private readonly offered = new BoundedMap<string, { rate: number; expires: number }>(MAX_CACHED_CHANNELS);
  /** Channels with a shard's rate kept (a hint: invalidating one of them looks for its shards). */
  private readonly sharded = new BoundedMap<string, true>(MAX_CACHED_CHANNELS);

  constructor(opts: DropRateReaderOptions) {
    this.store = opts.store;
    this.fallbackRate = clampRate(opts.fallbackRate);
    this.cacheMs = opts.cacheMs ?? 1000;
    this.readTimeoutMs = opts.readTimeoutMs ?? 1000;
    this.now = opts.now ?? Date.now;
    this.log = opts.log ?? ((m) => console.warn(m));
  }

  /** The drop rate for a channel (cached for `cacheMs`). Never rejects. */
  rateFor(channel: string): Promise<ResolvedRate> {
    const fresh = this.offered.get(channel);
    if (fresh && fresh.expires > this.now()) return Promise.resolve({ rate: fresh.rate, source: "fast-loop" });
    return this.stored(channel);
  }

  /** The rate the store gives a channel (its key, its channel's for a shard, the global one), cached. */
  private stored(channel: string): Promise<ResolvedRate> {
    const now = this.now();
    const hit = this.cache.get(channel);
    if (hit && hit.expires > now) {
      return hit.value ? Promise.resolve(hit.value) : this.join(channel, hit);
    }
    return this.start(channel, now);
  }

  private start(channel: string, now: number): Promise<ResolvedRate> {
    this.noteShard(channel);
    const entry: CacheEntry = { value: null, expires: now + this.cacheMs };
    const read = this.read(channel).then((v) => {
      entry.value = v;
      return v;
    });
    if (this.cacheMs > 0) {
      this.cache.set(channel, entry);
    }
    return read;
  }

  /**
   * Waits for a read another request started. In workerd I/O belongs to the request that started it,
   * code continuing from another request's promise runs in that request's context, and a cancelled
   * request's reads never answer; so a joiner never awaits the shared read. It checks for the answer
   * on timers of its own (functions/waiting.ts) for up to twice `readTimeoutMs` (a live read answers
   * within one, timeout included), then reads for itself.
   */
  private async join(channel: string, entry: CacheEntry): Promise<ResolvedRate> {
    if (await pollUntil(() => entry.value !== null, 2 * this.readTimeoutMs)) {
      return entry.value as unknown as ResolvedRate;
    }
    return this.start(channel, this.now());
  }

  /**
   * The channel's current rate from its object's fast loop (null: the channel has no fast loop, so KV
   * rules). Clamped like a stored rate; a value that is not a number is ignored.
   */
  offer(channel: string, rate: number | null): void {
    if (rate === null || typeof rate !== "number" || Number.isNaN(rate)) {
      this.offered.delete(channel);
      return;
    }
    this.offered.set(channel, { rate: clampRate(rate), expires: this.now() + CHANNEL_RATE_TTL_MS });
    this.noteShard(channel);
  }

  /**
   * Forgets cached rates, the channel objects' too (an admin write in this isolate takes effect at
   * once). A channel's shards go with it: they may hold its rate.
   */
  invalidate(channel?: string): void {
    if (channel === undefined || channel === "*") {
      this.cache.clear();
      this.offered.clear();
      this.sharded.clear();
      this.globalText = null;
      return;
    }
    this.cache.delete(channel);
    this.offered.delete(channel);
    // Its shards only when this isolate keeps any: a sampler run invalidates hundreds of channels.
    if (!this.sharded.has(channel)) return;
    this.sharded.delete(channel);
    const shards = channel + SHARD_KEY_SEPARATOR;
    for (const map of [this.cache, this.offered]) {
      for (const key of [...map.keys()]) if (key.startsWith(shards)) map.delete(key);
    }
  }

  private noteShard(key: string): void {
    const base = splitShardKey(key).channel;
    if (base !== key) this.sharded.set(base, true);
  }

  /**
   * The global key's text, cached for `cacheMs` for all channels together: otherwise every channel
   * without its own key would read the same global key again on each of its own misses.
   */
  private globalText: { text: string | null; expires: number } | null = null;

  private async readGlobal(): Promise<string | null> {
    const cached = this.globalText;
    if (cached && cached.expires > this.now()) return cached.text;
    const text = await this.get(GLOBAL_RATE_KEY);
    if (this.cacheMs > 0) this.globalText = { text, expires: this.now() + this.cacheMs };
    return text;
  }

  private async read(channel: string): Promise<ResolvedRate> {
    let text: string | null;
    let source: RateSource = "channel";
    try {
      text = await this.get(CHANNEL_RATE_PREFIX + channel);
      // A shard without a key of its own runs at its channel's rate (docs/api.md, "Shards"): read
      // through the channel's own cache entry, so the shards of one channel share its read.
      const base = splitShardKey(channel).channel;
      if (text === null && base !== channel) return this.stored(base);
      if (text === null) {
        source = "global";
        text = await this.readGlobal();
      }
    } catch (e) {
      return this.fallback("unreadable", e instanceof Error ? e.message : String(e));
    }
    this.logged.delete("unreadable"); // the store answers again: log the next outage too
    if (text === null) return this.fallback("missing", "no throttleRate key is set");
    const rate = parseStoredRate(text);
    if (rate === null) return this.fallback("non-numeric", `${source} value is not a number`);
    return { rate, source };
  }

  private get(key: string): Promise<string | null> {
    if (!(this.readTimeoutMs > 0)) return this.store.get(key);
    let timer: ReturnType<typeof setTimeout> | undefined;
    const timeout = new Promise<never>((_, reject) => {
      timer = setTimeout(() => reject(new Error(`read timed out after ${this.readTimeoutMs} ms`)), this.readTimeoutMs);
    });
    return Promise.race([this.store.get(key), timeout]).finally(() => {
      if (timer !== undefined) clearTimeout(timer);
    });
  }

  private fallback(cause: FallbackCause, detail: string): ResolvedRate {
    if (!this.logged.has(cause)) {
      this.logged.add(cause);
      this.log(`floodgate throttle: using fallback drop rate ${this.fallbackRate} (${cause}: ${detail})`);
    }
    return { rate: this.fallbackRate, source: "fallback", cause };
  }
}

export type Decision = ({ action: "deliver" } | { action: "drop" }) & ResolvedRate;

export interface DecideOptions {
  reader: DropRateReader;
  /** Uniform in [0,1). Default `Math.random`. */
  random?: () => number;
  /** The analytics channel: never throttled, never read from the store. */
  analyticsChannel: string;
  /** When given, drops use deterministic thinning (functions/thinning.ts) instead of `random`. */
  thinning?: Thinning | null;
}

/**
 * Decides one message: drop with probability equal to the channel's drop rate (or, with thinning,
 * drop exactly that share in a regular pattern). Rate 0 never drops, rate 1 always drops.
 */
export async function beforePublish(channel: string, opts: DecideOptions): Promise<Decision> {
  if (channel === opts.analyticsChannel) return { action: "deliver", rate: 0, source: "channel" };
  const resolved = await opts.reader.rateFor(channel);
  const drop = opts.thinning
    ? opts.thinning.drop(channel, resolved.rate)
    : (opts.random ?? Math.random)() < resolved.rate;
  return { action: drop ? "drop" : "deliver", ...resolved };
}
