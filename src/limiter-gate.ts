/**
 * The Worker side of the rate limiter: picks the bucket key and limit, asks the bucket's shard,
 * answers 429 with the contract's body and headers, and keeps a deny cache.
 *
 * Deny cache: once a key is denied until time T, this isolate answers 429 for it until T without
 * calling the object. It can only deny, never admit, so strictness holds; a flooding subject then
 * costs about one object call per refill interval instead of one per request.
 *
 * Coalescing: buckets live in shards, many keys to an object (src/limiter-shard.ts). Requests whose
 * keys share a shard and arrive while that shard's call is in flight go to it together as one
 * `decide` call (src/coalescer.ts), one entry per key with its count. The shard still decides every
 * key's tokens against that key's own bucket (at most what it holds, in arrival order), so
 * strictness holds, but a crowd of subjects costs one round trip per batch instead of one per
 * request. A request whose batch never answers asks the shard itself after
 * {@link FOLLOWER_PATIENCE_MS}: that can charge it twice (once in the lost batch), never admit it twice.
 *
 * Leases: for a hot key (at least {@link LEASE_MIN_DEMAND} requests in this isolate over the last
 * 250–500 ms), a charge also asks for that many extra tokens, and later requests spend them here with
 * no object call at all until they run out or {@link LEASE_SPEND_MS} has passed. The object takes
 * leased tokens from the bucket when it grants them and keeps counting them as in the bucket until
 * they are settled, so leases never admit what the bucket would not (src/bucket-charge.ts). Their cost
 * is on the other side: tokens on lease here are not available to another isolate until they are
 * spent, settled on this isolate's next call, or expire. A spent-out lease is settled at once.
 */

import { type BatchChargeResult, LEASE_SPEND_MS, type LeaseRequest } from "./bucket-charge";
import { Coalescer, LOST } from "./coalescer";
import { ApiError } from "./errors";
import { type KeyCharge, type KeyResult, shardOf } from "./limiter-shard";
import { type Limit, sameLimit } from "./limits";

export type BucketName = "publish" | "subscribe" | "token-issue" | "read";

const MESSAGES: Record<BucketName, string> = {
  publish: "publish rate limit exceeded",
  subscribe: "subscribe rate limit exceeded",
  "token-issue": "token issue rate limit exceeded",
  read: "read rate limit exceeded",
};

/** What a shard answers for a batch of keys' charges, in order; backed by `LimiterShard.decide`. */
export interface BucketBackend {
  charge(shard: number, charges: KeyCharge[]): Promise<KeyResult[]>;
}

/** Who answered: the bucket's object, this isolate's deny cache, or a lease this isolate holds. */
export type DecisionSource = "object" | "deny_cache" | "lease";

export interface GateEvents {
  decision(bucket: BucketName, allowed: boolean, source: DecisionSource): void;
  error(bucket: BucketName): void;
}

/** Requests for one key seen in this isolate over the last 250–500 ms before a charge asks for a lease. */
export const LEASE_MIN_DEMAND = 4;
const DEMAND_WINDOW_MS = 250;
/** Most keys whose leases and demand this isolate tracks; beyond it they are forgotten (leases expire). */
const MAX_TRACKED_KEYS = 10_000;

/** A lease this isolate is spending. */
interface HeldLease {
  id: string;
  left: number;
  /** Spend before this (isolate clock): {@link LEASE_SPEND_MS} after the charge that brought it was sent. */
  until: number;
  /** Whole tokens the object kept after granting it, for the RateLimit header. */
  objectRemaining: number;
  fullAt: number;
}

/** Per key and limit: leases held, leases to settle, and recent demand. */
interface KeyState {
  leases: HeldLease[];
  settle: LeaseRequest["settle"];
  windowStart: number;
  seen: number;
  seenBefore: number;
}

/** How long a batch with nothing ahead of it gathers company before it is sent, in ms. */
export const GATHER_MS = 1;
/** Most requests one object call decides. */
const MAX_BATCH = 1000;
/** How long a batch waits for the call ahead of it before it is sent regardless. */
export const STALL_MS = 1000;
/** How long a follower waits for its batch before it asks the object itself. */
export const FOLLOWER_PATIENCE_MS = 2 * STALL_MS;

/** `ctx.waitUntil`, so a batch's call outlives a leader whose client went away. */
export type Defer = (p: Promise<unknown>) => void;

/** One request's charge; every request in a batch has keys of the same shard. */
interface Charge {
  bucket: BucketName;
  key: string;
  limit: Limit;
  /** The key and limit together: what leases, demand and one entry of a shard call are kept by. */
  bucketId: string;
}

/** The requests of one batch that go to the shard under one key and limit. */
interface Entry {
  first: Charge;
  /** Their places in the batch, in arrival order. */
  at: number[];
  settle: LeaseRequest["settle"];
}

interface Answer {
  headers?: Record<string, string>;
  error?: unknown;
}

/** `RateLimit-Policy` and `RateLimit` fields (draft-ietf-httpapi-ratelimit-headers-08+). */
export function rateLimitHeaders(
  bucket: BucketName,
  limit: Limit,
  remaining: number,
  fullInMs: number,
): Record<string, string> {
  const window = Math.ceil((limit.burst * limit.perMs) / limit.rate / 1000);
  return {
    "RateLimit-Policy": `"${bucket}";q=${limit.burst};w=${window}`,
    RateLimit: `"${bucket}";r=${remaining};t=${Math.ceil(Math.max(0, fullInMs) / 1000)}`,
  };
}

/** The 429 for a denial. */
export function deniedError(bucket: BucketName, limit: Limit, retryAfterMs: number, fullInMs: number): ApiError {
  const retry = Math.max(1, Math.ceil(retryAfterMs));
  return new ApiError(
    "rate_limited",
    MESSAGES[bucket],
    { bucket, retry_after_ms: String(retry) },
    { "Retry-After": String(Math.max(1, Math.ceil(retry / 1000))), ...rateLimitHeaders(bucket, limit, 0, fullInMs) },
  );
}

interface DenyEntry {
  until: number;
  limit: Limit;
  fullAt: number;
}

export class LimiterGate {
  private readonly deny = new Map<string, DenyEntry>();
  private readonly keys = new Map<string, KeyState>();
  /** Batches per shard. */
  private readonly batches = new Coalescer<Charge, Answer>((shard, charges) => this.chargeBatch(charges, shard), {
    maxBatch: MAX_BATCH,
    gatherMs: GATHER_MS,
    stallMs: STALL_MS,
    patienceMs: FOLLOWER_PATIENCE_MS,
  });
  /** Object calls made, for the benchmark's calls-per-denial figure. */
  calls = 0;

  constructor(
    private readonly backend: BucketBackend,
    private readonly events: GateEvents,
    private readonly now: () => number = Date.now,
  ) {}

  /**
   * Charges one request to `key`. Returns the headers for the allowed response ({} when the budget is
   * disabled). @throws ApiError 429 when denied, 500 when the limiter fails (fail closed).
   */
  async check(bucket: BucketName, key: string, limit: Limit | null, defer?: Defer): Promise<Record<string, string>> {
    if (!limit) return {};
    const now = this.now();
    const bucketId = `${limit.rate}/${limit.perMs}/${limit.burst}|${key}`;
    const state = this.keyState(bucketId, now);
    state.seen++;
    // Tokens already taken from the bucket are spent first, even past a cached denial.
    const leased = this.spendLease(bucket, limit, state, now);
    if (leased) return leased;
    const cached = this.deny.get(key);
    if (cached && cached.until > now && sameLimit(cached.limit, limit)) {
      this.events.decision(bucket, false, "deny_cache");
      throw deniedError(bucket, limit, cached.until - now, cached.fullAt - now);
    }
    if (cached) this.deny.delete(key);

    const charge: Charge = { bucket, key, limit, bucketId };
    const shard = String(shardOf(key));
    const batched = await this.batches.submit(shard, charge, defer);
    // A batch that never answered (its leader went away): ask the shard alone.
    const answer = batched === LOST ? ((await this.chargeBatch([charge], shard))[0] as Answer) : batched;
    if (answer.error) throw answer.error;
    return answer.headers ?? {};
  }

  /**
   * Answers `charges` (keys of one shard, arrival order): each first from a lease of its key that
   * arrived while they waited, the rest with one call to the shard, one entry per key and limit.
   * Never rejects: a failure is an answer each.
   */
  private async chargeBatch(charges: Charge[], shard: string): Promise<Answer[]> {
    const sentAt = this.now();
    const answers: Answer[] = new Array(charges.length);
    const entries = new Map<string, Entry>();
    charges.forEach((c, i) => {
      const headers = this.spendLease(c.bucket, c.limit, this.keyState(c.bucketId, sentAt), sentAt);
      if (headers) {
        answers[i] = { headers };
        return;
      }
      const entry = entries.get(c.bucketId);
      if (entry) entry.at.push(i);
      else entries.set(c.bucketId, { first: c, at: [i], settle: [] });
    });
    if (entries.size === 0) return answers;
    const sent = [...entries.values()];
    const request: KeyCharge[] = sent.map((e) => {
      const state = this.keyState(e.first.bucketId, sentAt);
      const demand = state.seen + state.seenBefore;
      e.settle = state.settle.splice(0);
      return {
        key: e.first.key,
        limit: e.first.limit,
        count: e.at.length,
        lease: { want: demand >= LEASE_MIN_DEMAND ? demand : 0, settle: e.settle },
      };
    });
    let results: (KeyResult | { error: unknown })[];
    try {
      this.calls++;
      results = await this.backend.charge(Number(shard), request);
    } catch (e) {
      results = sent.map(() => ({ error: e }));
    }
    sent.forEach((e, j) => {
      const { bucket, key, limit, bucketId } = e.first;
      const state = this.keyState(bucketId, sentAt);
      const result = results[j];
      if (!result || "error" in result) {
        // Settling is idempotent, so these go again with the next call.
        state.settle.push(...e.settle);
        const cause = result ? result.error : "no answer for this key";
        e.at.forEach((i, k) => {
          answers[i] = { error: this.failure(bucket, cause, k === 0) };
        });
        return;
      }
      if (result.lease) {
        state.leases.push({
          id: result.lease.id,
          left: result.lease.tokens,
          until: sentAt + LEASE_SPEND_MS,
          objectRemaining: result.remaining,
          fullAt: this.now() + result.fullInMs,
        });
      }
      const decided = this.answers(bucket, key, limit, result, e.at.length);
      e.at.forEach((i, k) => {
        answers[i] = decided[k] as Answer;
      });
    });
    return answers;
  }

  /** This key's lease and demand state, with the demand window moved on to `now`. */
  private keyState(bucketId: string, now: number): KeyState {
    let state = this.keys.get(bucketId);
    if (!state) {
      if (this.keys.size >= MAX_TRACKED_KEYS) this.keys.clear();
      state = { leases: [], settle: [], windowStart: now, seen: 0, seenBefore: 0 };
      this.keys.set(bucketId, state);
    }
    const elapsed = now - state.windowStart;
    if (elapsed >= DEMAND_WINDOW_MS) {
      state.seenBefore = elapsed < 2 * DEMAND_WINDOW_MS ? state.seen : 0;
      state.seen = 0;
      state.windowStart = now;
    }
    return state;
  }

  /**
   * Admits one request from a lease this isolate holds, or returns null when none has a token left.
   * Leases past their spending window, or spent out, are queued to be settled.
   */
  private spendLease(bucket: BucketName, limit: Limit, state: KeyState, now: number): Record<string, string> | null {
    while (state.leases.length > 0) {
      const lease = state.leases[0] as HeldLease;
      if (lease.until > now && lease.left > 0) {
        lease.left--;
        if (lease.left === 0) this.retire(state);
        this.events.decision(bucket, true, "lease");
        return rateLimitHeaders(bucket, limit, lease.objectRemaining + lease.left, lease.fullAt - now);
      }
      this.retire(state);
    }
    return null;
  }

  /** Stops spending the oldest lease; its unused tokens go back with the next call (or it expires). */
  private retire(state: KeyState): void {
    const lease = state.leases.shift();
    if (!lease) return;
    state.settle.push({ id: lease.id, unused: lease.left });
    // Unsettled leases simply expire in the object, counted as spent: a bound on memory, not on safety.
    if (state.settle.length > 100) state.settle.shift();
  }

  private failure(bucket: BucketName, e: unknown, log: boolean): ApiError {
    if (log)
      console.error(`floodgate limiter: ${bucket} bucket failed, failing closed`, e instanceof Error ? e.message : e);
    this.events.error(bucket);
    return new ApiError("internal", "rate limiter unavailable");
  }

  /** The answers for a batch of `count` in arrival order; records a denial in the deny cache. */
  private answers(bucket: BucketName, key: string, limit: Limit, result: BatchChargeResult, count: number): Answer[] {
    const granted = Math.min(result.granted, count);
    if (granted < count) {
      if (this.deny.size >= 10_000) this.deny.clear();
      const at = this.now();
      this.deny.set(key, { until: at + result.retryAfterMs, limit, fullAt: at + result.fullInMs });
    }
    return Array.from({ length: count }, (_, i) => {
      const allowed = i < granted;
      this.events.decision(bucket, allowed, "object");
      // Earlier requests in the batch saw the tokens later ones took.
      return allowed
        ? {
            headers: rateLimitHeaders(
              bucket,
              limit,
              result.remaining + (result.lease?.tokens ?? 0) + (granted - 1 - i),
              result.fullInMs,
            ),
          }
        : { error: deniedError(bucket, limit, result.retryAfterMs, result.fullInMs) };
    });
  }
}
