/**
 * What a rate-limited response says (docs/api.md, "Rate limits"): the `RateLimit-Policy` and
 * `RateLimit` fields of an allowed response, and the 429 of a denial with its `Retry-After`.
 */

import type { Limit } from "../settings/limits";
import { ApiError } from "../wire/errors";

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

/** A denial: the bucket, its limit, when a token is due again and when the bucket is full, in ms from now. */
export interface Denial {
  bucket: BucketName;
  limit: Limit;
  retryAfterMs: number;
  fullInMs: number;
}

/** The 429's parts, one place for both ways of answering it (src/worker/gate/denied-response.ts). */
export function denialParts({ bucket, limit, retryAfterMs, fullInMs }: Denial) {
  const retry = Math.max(1, Math.ceil(retryAfterMs));
  return {
    message: MESSAGES[bucket],
    meta: { bucket, retry_after_ms: String(retry) },
    headers: {
      "Retry-After": String(Math.max(1, Math.ceil(retry / 1000))),
      ...rateLimitHeaders(bucket, limit, 0, fullInMs),
    },
  };
}

/** The 429 for a denial, to throw. */
export function deniedError(denial: Denial): ApiError {
  const { message, meta, headers } = denialParts(denial);
  return new ApiError("rate_limited", message, meta, headers);
}
