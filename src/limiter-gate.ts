/**
 * The Worker side of the rate limiter: picks the bucket key and limit, asks the bucket's object,
 * answers 429 with the contract's body and headers, and keeps a deny cache.
 *
 * Deny cache: once a key is denied until time T, this isolate answers 429 for it until T without
 * calling the object. It can only deny, never admit, so strictness holds; a flooding subject then
 * costs about one object call per refill interval instead of one per request.
 *
 * Coalescing: while a call for a key is in flight, further requests for the same key and limit in
 * this isolate join one open batch, which goes to the object as a single `chargeMany(n)` once the
 * call ahead of it returns. The object still decides every token (at most what the bucket holds, in
 * arrival order), so strictness holds, but a hot subject costs one round trip per batch instead of
 * one per request. A request with nothing in flight ahead of it waits {@link GATHER_MS} for company
 * first: 1 ms of latency that halved the calls per request in `npm run bench`.
 *
 * Each batch is sent by its first request (its leader), which hands the call to `waitUntil` so it
 * finishes even if that client disconnects. Nobody awaits a promise another request settles (see
 * src/waiting.ts): followers and the next leader check shared state on timers of their own. A follower
 * with no answer after {@link FOLLOWER_PATIENCE_MS} asks the object itself — that can charge it twice
 * (once in the lost batch), never admit it twice. A leader stuck behind a call that never answers
 * sends anyway after {@link STALL_MS}.
 */

import { pollUntil } from "../functions/waiting";
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

interface Answer {
  headers?: Record<string, string>;
  error?: unknown;
}

/** A follower's place in a batch; the leader fills `answer`. */
interface Slot {
  answer: Answer | null;
}

interface Batch {
  /** The leader is not in here: it gets its answer directly. */
  followers: Slot[];
  closed: boolean;
  /** Set once this batch's call has answered (or failed). */
  finished: boolean;
}

interface Lane {
  open: Batch | null;
  /** The newest batch sent or about to be sent; null when nothing is in flight. */
  tail: Batch | null;
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
  private readonly lanes = new Map<string, Lane>();
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

    const laneKey = `${limit.rate}/${limit.perMs}/${limit.burst}|${key}`;
    let lane = this.lanes.get(laneKey);
    if (!lane) {
      lane = { open: null, tail: null };
      this.lanes.set(laneKey, lane);
    }
    const open = lane.open;
    if (open && !open.closed && open.followers.length < MAX_BATCH - 1) return this.follow(bucket, key, limit, open);
    const work = this.lead(bucket, key, limit, laneKey, lane);
    defer?.(work.catch(() => {}));
    return work;
  }

  /** Joins an open batch; if no answer comes in time, asks the object alone. */
  private async follow(bucket: BucketName, key: string, limit: Limit, batch: Batch): Promise<Record<string, string>> {
    const slot: Slot = { answer: null };
    batch.followers.push(slot);
    let answer: Answer;
    if (await pollUntil(() => slot.answer !== null, FOLLOWER_PATIENCE_MS)) {
      answer = slot.answer as unknown as Answer;
    } else {
      // The batch's leader went away. Leave the batch if it has not gone out yet, then go alone.
      if (!batch.closed) batch.followers.splice(batch.followers.indexOf(slot), 1);
      answer = await this.solo(bucket, key, limit);
    }
    if (answer.error) throw answer.error;
    return answer.headers ?? {};
  }

  /** One request, one call, outside any batch. */
  private async solo(bucket: BucketName, key: string, limit: Limit): Promise<Answer> {
    let result: BatchChargeResult;
    try {
      this.calls++;
      result = await this.backend.charge(key, limit, 1);
    } catch (e) {
      return { error: this.failure(bucket, e) };
    }
    return this.answers(bucket, key, limit, result, 1)[0] as Answer;
  }

  private failure(bucket: BucketName, e: unknown, log = true): ApiError {
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

  /** Opens a batch, waits for the call ahead (if any), then sends the batch and answers everyone in it. */
  private async lead(
    bucket: BucketName,
    key: string,
    limit: Limit,
    laneKey: string,
    lane: Lane,
  ): Promise<Record<string, string>> {
    const batch: Batch = { followers: [], closed: false, finished: false };
    const ahead = lane.tail;
    lane.open = batch;
    lane.tail = batch;
    try {
      if (ahead) await pollUntil(() => ahead.finished, STALL_MS);
      else await new Promise<void>((r) => setTimeout(r, GATHER_MS)); // let requests arriving meanwhile join
      batch.closed = true;
      if (lane.open === batch) lane.open = null;
      const count = 1 + batch.followers.length;
      let all: Answer[];
      try {
        this.calls++;
        const result = await this.backend.charge(key, limit, count);
        all = this.answers(bucket, key, limit, result, count);
      } catch (e) {
        all = Array.from({ length: count }, (_, i) => ({ error: this.failure(bucket, e, i === 0) }));
      }
      // Position 0 is the leader.
      batch.followers.forEach((slot, i) => {
        slot.answer = all[i + 1] as Answer;
      });
      const own = all[0] as Answer;
      if (own.error) throw own.error;
      return own.headers ?? {};
    } finally {
      batch.finished = true;
      if (lane.tail === batch) {
        lane.tail = null;
        if (!lane.open) this.lanes.delete(laneKey);
      }
    }
  }
}

function sameLimit(a: Limit, b: Limit): boolean {
  return a.rate === b.rate && a.perMs === b.perMs && a.burst === b.burst;
}
