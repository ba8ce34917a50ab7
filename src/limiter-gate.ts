/**
 * The Worker side of the rate limiter: picks the bucket key and limit, asks the bucket's object,
 * answers 429 with the contract's body and headers, and keeps a deny cache.
 *
 * Deny cache: once a key is denied until time T, this isolate answers 429 for it until T without
 * calling the object. It can only deny, never admit, so strictness holds; a flooding subject then
 * costs about one object call per refill interval instead of one per request.
 *
 * Coalescing: requests for one key and limit that arrive while that key's object call is in flight
 * go to the object together as one `chargeMany(n)` (src/coalescer.ts). The object still decides every
 * token (at most what the bucket holds, in arrival order), so strictness holds, but a hot subject
 * costs one round trip per batch instead of one per request. A request whose batch never answers
 * asks the object itself after {@link FOLLOWER_PATIENCE_MS}: that can charge it twice (once in the
 * lost batch), never admit it twice.
 */

import { Coalescer, LOST } from "./coalescer";
import { ApiError } from "./errors";
import type { Limit } from "./limits";
import type { BatchChargeResult } from "./rate-limiter";

export type BucketName = "publish" | "subscribe" | "token-issue";

const MESSAGES: Record<BucketName, string> = {
  publish: "publish rate limit exceeded",
  subscribe: "subscribe rate limit exceeded",
  "token-issue": "token issue rate limit exceeded",
};

/** What a bucket's object answers for `count` requests at once; backed by `RateLimiter.chargeMany`. */
export interface BucketBackend {
  charge(key: string, limit: Limit, count: number): Promise<BatchChargeResult>;
}

export interface GateEvents {
  /** `fromCache`: answered by the deny cache, without an object call. */
  decision(bucket: BucketName, allowed: boolean, fromCache: boolean): void;
  error(bucket: BucketName): void;
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

/** One request's charge; every request in a batch has the same bucket, key and limit. */
interface Charge {
  bucket: BucketName;
  key: string;
  limit: Limit;
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
  /** Batches per key and limit. */
  private readonly batches = new Coalescer<Charge, Answer>((_lane, charges) => this.chargeBatch(charges), {
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
    const cached = this.deny.get(key);
    if (cached && cached.until > now && sameLimit(cached.limit, limit)) {
      this.events.decision(bucket, false, true);
      throw deniedError(bucket, limit, cached.until - now, cached.fullAt - now);
    }
    if (cached) this.deny.delete(key);

    const charge: Charge = { bucket, key, limit };
    const laneKey = `${limit.rate}/${limit.perMs}/${limit.burst}|${key}`;
    const batched = await this.batches.submit(laneKey, charge, defer);
    // A batch that never answered (its leader went away): ask the object alone.
    const answer = batched === LOST ? ((await this.chargeBatch([charge]))[0] as Answer) : batched;
    if (answer.error) throw answer.error;
    return answer.headers ?? {};
  }

  /** One object call for `charges` (same key and limit); never rejects: a failure is an answer each. */
  private async chargeBatch(charges: Charge[]): Promise<Answer[]> {
    const { bucket, key, limit } = charges[0] as Charge;
    const count = charges.length;
    try {
      this.calls++;
      const result = await this.backend.charge(key, limit, count);
      return this.answers(bucket, key, limit, result, count);
    } catch (e) {
      return charges.map((_, i) => ({ error: this.failure(bucket, e, i === 0) }));
    }
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
      this.events.decision(bucket, allowed, false);
      // Earlier requests in the batch saw the tokens later ones took.
      return allowed
        ? { headers: rateLimitHeaders(bucket, limit, result.remaining + (granted - 1 - i), result.fullInMs) }
        : { error: deniedError(bucket, limit, result.retryAfterMs, result.fullInMs) };
    });
  }
}

function sameLimit(a: Limit, b: Limit): boolean {
  return a.rate === b.rate && a.perMs === b.perMs && a.burst === b.burst;
}
