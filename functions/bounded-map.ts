/**
 * A map with a size cap and one named eviction policy: least recently used goes first.
 *
 * Every per-isolate cache keyed by something an outsider chooses (a channel name, a token, a bucket
 * key) must be bounded. Clearing the whole map at the cap would also forget every hot entry at once
 * (every channel's thinning credit, every rate, every limiter key's leases); evicting the least
 * recently used entry forgets only the coldest one.
 *
 * Recency lives in the `Map`'s insertion order: a read (`get`, `getOrSet`) or a write moves the key
 * to the newest end, and eviction takes the oldest end. Every operation is O(1).
 *
 * Entries carry no time of their own: a cache whose values expire stores the expiry in the value
 * and checks it on read (as functions/before-publish.ts does), since what "expired" means differs
 * per cache.
 *
 * Converting a `Map` cache: replace `new Map()` with `new BoundedMap(max)` and drop the
 * `if (m.size >= max) m.clear()` line; `get`/`set`/`has`/`delete`/`clear`/`size` keep their `Map`
 * meaning, except that `get` and `set` count as a use. A get-or-create becomes `getOrSet(key, make)`.
 * `peek` reads without counting as a use.
 *
 * Entries of very different sizes (a token's claims) are also bounded in bytes: give `bytes` with
 * the most bytes kept and how many one entry holds (pure, so the same on set and on eviction); the
 * least recently used entries go until the new one fits, and an entry larger than the whole budget
 * is not kept at all.
 */
export class BoundedMap<K, V> {
  private readonly entries = new Map<K, V>();
  private heldBytes = 0;

  /** @param maxSize most entries kept (at least 1). */
  constructor(
    readonly maxSize: number,
    private readonly bytes?: { max: number; of: (key: K, value: V) => number },
  ) {
    if (!Number.isInteger(maxSize) || maxSize < 1) throw new RangeError("BoundedMap maxSize must be an integer ≥ 1");
  }

  get size(): number {
    return this.entries.size;
  }

  /** Bytes the entries hold, as `bytes.of` counts them (0 without a byte bound). */
  get byteSize(): number {
    return this.heldBytes;
  }

  has(key: K): boolean {
    return this.entries.has(key);
  }

  /** The value for `key`, marking it as just used. */
  get(key: K): V | undefined {
    const value = this.entries.get(key);
    if (value === undefined && !this.entries.has(key)) return undefined;
    // Already the newest (a hot key read again and again): nothing to move.
    if (key !== this.newest) {
      this.entries.delete(key);
      this.entries.set(key, value as V);
      this.newest = key;
    }
    return value;
  }

  /** The most recently used key, while it is still in the map (cleared by anything that may remove it). */
  private newest: K | undefined = undefined;

  /** The value for `key` without marking it as used. */
  peek(key: K): V | undefined {
    return this.entries.get(key);
  }

  /** Sets `key` as the most recently used entry; at the cap, the least recently used one goes. */
  set(key: K, value: V): this {
    if (this.entries.has(key)) this.delete(key);
    else if (this.entries.size >= this.maxSize) this.evictOldest();
    if (this.bytes) {
      const size = this.bytes.of(key, value);
      if (size > this.bytes.max) return this;
      while (this.heldBytes + size > this.bytes.max && this.entries.size > 0) this.evictOldest();
      this.heldBytes += size;
    }
    this.entries.set(key, value);
    this.newest = key;
    return this;
  }

  private evictOldest(): void {
    const oldest = this.entries.keys().next();
    if (!oldest.done) this.delete(oldest.value);
  }

  /** The value for `key` (marked as used), created by `make` and stored when there is none. */
  getOrSet(key: K, make: () => V): V {
    if (this.entries.has(key)) return this.get(key) as V;
    const value = make();
    this.set(key, value);
    return value;
  }

  delete(key: K): boolean {
    if (key === this.newest) this.newest = undefined;
    if (this.bytes && this.entries.has(key)) this.heldBytes -= this.bytes.of(key, this.entries.get(key) as V);
    return this.entries.delete(key);
  }

  /** The keys, least recently used first (reading them does not touch their order). */
  keys(): IterableIterator<K> {
    return this.entries.keys();
  }

  clear(): void {
    this.newest = undefined;
    this.heldBytes = 0;
    this.entries.clear();
  }
}
