/**
 * The limiter's deny cache: once a key is denied until time T, this isolate answers 429 for it until
 * T without calling the object. It can only deny, never admit, so strictness holds; a flooding
 * subject then costs about one object call per refill interval instead of one per request.
 */
import { BoundedMap } from "../../functions/bounded-map";
import { type Limit, sameLimit } from "../settings/limits";

/** A key denied until `until` under `limit`, its bucket full again at `fullAt` (isolate clock). */
export interface Denial {
  until: number;
  limit: Limit;
  fullAt: number;
}

/** Most keys remembered; past it the least recently used go first (it can only deny, so forgetting is safe). */
const MAX_KEYS = 10_000;

export class DenyCache {
  private readonly denied = new BoundedMap<string, Denial>(MAX_KEYS);

  /** The denial still in force for `key` under `limit` at `now`, if any; a stale one is forgotten. */
  get(key: string, limit: Limit, now: number): Denial | null {
    const d = this.denied.get(key);
    if (!d) return null;
    if (d.until > now && sameLimit(d.limit, limit)) return d;
    this.denied.delete(key);
    return null;
  }

  set(key: string, denial: Denial): void {
    this.denied.set(key, denial);
  }

  /** Forgets `key`'s denial: its bucket got a token back. */
  forget(key: string): void {
    this.denied.delete(key);
  }

  /** Forgets every denial (tests move time behind the cache's back). */
  clear(): void {
    this.denied.clear();
  }
}
