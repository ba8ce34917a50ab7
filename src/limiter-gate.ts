/**
 * The Worker side of the rate limiter: picks the bucket key and limit, asks the bucket's object,
 * answers 429 with the contract's body and headers, and keeps a deny cache.
 *
 * Deny cache: once a key is denied until time T, this isolate answers 429 for it until T without
 * calling the object. It can only deny, never admit, so strictness holds; a flooding subject then
 * costs about one object call per refill interval instead of one per request.
 */
import { ApiError } from "./errors";
import type { Limit } from "./limits";
import type { ChargeResult } from "./rate-limiter";

export type BucketName = "publish" | "subscribe" | "token-issue";

const MESSAGES: Record<BucketName, string> = {
  publish: "publish rate limit exceeded",
  subscribe: "subscribe rate limit exceeded",
  "token-issue": "token issue rate limit exceeded",
};

/** What a bucket's object answers; `RateLimiter` stubs satisfy it. */
export interface BucketBackend {
  charge(key: string, limit: Limit): Promise<ChargeResult>;
}

export interface GateEvents {
  /** `fromCache`: answered by the deny cache, without an object call. */
  decision(bucket: BucketName, allowed: boolean, fromCache: boolean): void;
  error(bucket: BucketName): void;
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
  async check(bucket: BucketName, key: string, limit: Limit | null): Promise<Record<string, string>> {
    if (!limit) return {};
    const now = this.now();
    const cached = this.deny.get(key);
    if (cached && cached.until > now && sameLimit(cached.limit, limit)) {
      this.events.decision(bucket, false, true);
      throw deniedError(bucket, limit, cached.until - now, cached.fullAt - now);
    }
    if (cached) this.deny.delete(key);
    let result: ChargeResult;
    try {
      this.calls++;
      result = await this.backend.charge(key, limit);
    } catch (e) {
      this.events.error(bucket);
      console.error(`floodgate limiter: ${bucket} bucket failed, failing closed`, e instanceof Error ? e.message : e);
      throw new ApiError("internal", "rate limiter unavailable");
    }
    this.events.decision(bucket, result.allowed, false);
    if (!result.allowed) {
      if (this.deny.size >= 10_000) this.deny.clear();
      const at = this.now();
      this.deny.set(key, { until: at + result.retryAfterMs, limit, fullAt: at + result.fullInMs });
      throw deniedError(bucket, limit, result.retryAfterMs, result.fullInMs);
    }
    return rateLimitHeaders(bucket, limit, result.remaining, result.fullInMs);
  }
}

function sameLimit(a: Limit, b: Limit): boolean {
  return a.rate === b.rate && a.perMs === b.perMs && a.burst === b.burst;
}
