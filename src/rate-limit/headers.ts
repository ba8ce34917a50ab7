/**
 * What a rate-limited response says (docs/api.md, "Rate limits"): the `RateLimit-Policy` and
 * `RateLimit` fields of an allowed response, and the 429 of a denial with its `Retry-After`.
 */
import { ApiError } from "../http/errors";
import type { Limit } from "./limits";

export type BucketName = "publish" | "subscribe" | "token-issue" | "read" | "admin-auth";

const MESSAGES: Record<BucketName, string> = {
  publish: "publish rate limit exceeded",
  subscribe: "subscribe rate limit exceeded",
  "token-issue": "token issue rate limit exceeded",
  read: "read rate limit exceeded",
  "admin-auth": "admin auth rate limit exceeded",
};

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
