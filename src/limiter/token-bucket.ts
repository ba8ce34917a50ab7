/**
 * A continuous-refill token bucket (docs/api.md, Rate limits). Pure, with the clock as an argument.
 *
 * Capacity `burst`, refilled at `rate` tokens per `perMs`, continuously (half a period gives half
 * the tokens back). A request takes one whole token; a denied request takes none.
 */
import type { Limit } from "../settings/limits";

export interface BucketState {
  /** Tokens in the bucket at `updatedAt` (fractional between refills). */
  tokens: number;
  /** Epoch ms of the last charge. */
  updatedAt: number;
}

export interface BucketDecision {
  allowed: boolean;
  /** Whole tokens left after this request. */
  remaining: number;
  /** Ms until the next whole token is back (0 when one is available now). */
  retryAfterMs: number;
  /** Ms until the bucket is full again. */
  fullInMs: number;
  state: BucketState;
}

/** A fresh, full bucket. */
export function fullBucket(limit: Limit, now: number): BucketState {
  return { tokens: limit.burst, updatedAt: now };
}

/**
 * Tokens after refilling up to `now`. A clock that steps back refills nothing.
 *
 * `held`: tokens out on lease (see src/limiter/limiter-shard.ts). They still count as in the bucket, so the
 * bucket itself refills only up to `burst − held`: tokens in the bucket plus tokens on lease never
 * exceed `burst`, exactly as if the leased ones had stayed in. Defaults to 0.
 */
export function refill(state: BucketState, limit: Limit, now: number, held = 0): number {
  const elapsed = Math.max(0, now - state.updatedAt);
  const cap = Math.max(0, limit.burst - held);
  return Math.min(Math.max(cap, state.tokens), state.tokens + (elapsed * limit.rate) / limit.perMs);
}

/**
 * Keeps a bucket's fill fraction when its limit changes, so a new configuration neither refills a
 * drained bucket to full nor empties a full one.
 */
export function rescale(state: BucketState, from: Limit, to: Limit, now: number): BucketState {
  const fraction = refill(state, from, now) / from.burst;
  return { tokens: Math.min(to.burst, fraction * to.burst), updatedAt: now };
}

/** Tiny tolerance so float refill arithmetic never denies a token that is due. */
const EPSILON = 1e-9;

/** Whether the bucket has refilled completely by `now` — the same as having no state at all. */
export function isFull(state: BucketState, limit: Limit, now: number): boolean {
  return refill(state, limit, now) + EPSILON >= limit.burst;
}

export interface BatchDecision {
  /** How many of the requests were admitted: the first `granted`, in order. */
  granted: number;
  /** Whole tokens left after the batch. */
  remaining: number;
  /** Ms until the next whole token is back (0 when one is available now). */
  retryAfterMs: number;
  /** Ms until the bucket is full again. */
  fullInMs: number;
  state: BucketState;
}

/**
 * Decides `count` requests that arrived together, in order: each takes one whole token while there is
 * one, the rest are denied and take none. Exactly what `count` calls of {@link take} would decide.
 */
export function takeMany(state: BucketState, limit: Limit, now: number, count: number, held = 0): BatchDecision {
  const tokens = refill(state, limit, now, held);
  const msPerToken = limit.perMs / limit.rate;
  const granted = Math.max(0, Math.min(count, Math.floor(tokens + EPSILON)));
  const after = Math.max(0, tokens - granted);
  const deniedSome = granted < count;
  const untilNext = Math.ceil((1 - after) * msPerToken);
  return {
    granted,
    remaining: Math.floor(after + EPSILON),
    retryAfterMs: after + EPSILON >= 1 ? 0 : deniedSome ? Math.max(1, untilNext) : untilNext,
    fullInMs: Math.ceil(Math.max(0, limit.burst - held - after) * msPerToken),
    // A denial consumes nothing; the refill so far is kept so the clock stays monotonic.
    state: { tokens: after, updatedAt: Math.max(now, state.updatedAt) },
  };
}

/**
 * Decides `count` tokens for one request that needs them all (the copies of one Pusher event): all
 * taken while the bucket holds `count` whole tokens, else none, the request denied with the time until
 * `count` are back (until it is full, when `count` is more than the burst: such a request is never
 * admitted).
 */
export function takeAll(state: BucketState, limit: Limit, now: number, count: number, held = 0): BatchDecision {
  const all = takeMany(state, limit, now, count, held);
  if (all.granted === count) return all;
  const none = takeMany(state, limit, now, 0, held);
  const missing = Math.min(count, limit.burst - held) - none.state.tokens;
  return { ...none, granted: 0, retryAfterMs: Math.max(1, Math.ceil((missing * limit.perMs) / limit.rate)) };
}

/** Takes one token if there is one. */
export function take(state: BucketState, limit: Limit, now: number): BucketDecision {
  const { granted, ...rest } = takeMany(state, limit, now, 1);
  return { allowed: granted === 1, ...rest };
}

/**
 * Puts `n` whole tokens back: requests that were charged and turned out not to owe their token (the
 * right admin bearer). Refilled first, so the returned tokens are not capped twice, like a settled
 * lease's unused ones; never past `burst − held`, so a refund can never make room for more than the
 * bucket would have held had the charge not been made. Pure.
 */
export function refund(state: BucketState, limit: Limit, now: number, n: number, held = 0): BucketState {
  if (!Number.isInteger(n) || n <= 0) return state;
  const tokens = refill(state, limit, now, held);
  return {
    tokens: Math.max(tokens, Math.min(limit.burst - held, tokens + n)),
    updatedAt: Math.max(now, state.updatedAt),
  };
}

/** A lease as its bucket's object stores it (see src/limiter/limiter-shard.ts). */
export interface OpenLease {
  id: string;
  tokens: number;
  /** Epoch ms when the object ends it, its tokens counted as spent. */
  expiresAt: number;
}

export interface LeasesEnded {
  state: BucketState;
  /** Tokens still out on the leases that stay open. */
  held: number;
  /** When the first lease that stays open ends (at most `now + ttlMs`). */
  firstEndsAt: number;
  /** Leases that ended now, expired or settled: the object forgets them. */
  ended: string[];
}

/**
 * Ends expired leases (their tokens count as spent) and settled ones (their unused tokens come
 * back, refilled first so they are not capped twice). Pure: the caller deletes `ended`.
 */
export function endLeases(
  state: BucketState,
  limit: Limit,
  now: number,
  open: OpenLease[],
  settle: { id: string; unused: number }[],
  ttlMs: number,
): LeasesEnded {
  if (open.length === 0) return { state, held: 0, firstEndsAt: now, ended: [] };
  let held = open.reduce((a, l) => a + l.tokens, 0);
  // Refill under the old hold before any lease ends, so the bucket never over-fills.
  let tokens = refill(state, limit, now, held);
  const settled = new Map(settle.map((s) => [s.id, s.unused]));
  const ended: string[] = [];
  let firstEndsAt = now + ttlMs;
  for (const l of open) {
    const expired = l.expiresAt <= now;
    const unused = settled.get(l.id);
    if (!expired && unused === undefined) {
      firstEndsAt = Math.min(firstEndsAt, l.expiresAt);
      continue;
    }
    ended.push(l.id);
    held -= l.tokens;
    if (!expired && unused !== undefined) tokens += Math.max(0, Math.min(l.tokens, Math.floor(unused)));
  }
  return {
    state: { tokens: Math.min(tokens, limit.burst - held), updatedAt: Math.max(now, state.updatedAt) },
    held,
    firstEndsAt,
    ended,
  };
}
