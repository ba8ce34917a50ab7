/**
 * One charge of one bucket, leases included: what a limiter object decides for a key, pure, with the
 * stored state, the open leases and the clock as arguments. The shard objects (src/limiter-shard.ts)
 * and the per-key objects they replace (src/rate-limiter.ts) store the result; this decides it.
 *
 * Leases: a hot isolate may take a few extra tokens with a charge and spend them itself, without a
 * round trip per request (src/limiter-gate.ts). A leased token is taken from the bucket when it is
 * granted, so nothing is admitted that the bucket did not hand out; and it still counts as in the
 * bucket until its lease ends, so the bucket refills only up to `burst − leased` and the burst bound
 * holds for any interval. A lease ends when its isolate settles it (unused tokens come back) or after
 * {@link LEASE_TTL_MS} (its tokens count as spent: an isolate that vanished can only under-admit).
 * An object at most grants half the whole tokens left after the batch, so others are never starved.
 */
import { type Limit, sameLimit } from "./limits";
import {
  type BatchDecision,
  type BucketState,
  endLeases,
  fullBucket,
  type OpenLease,
  rescale,
  takeMany,
} from "./token-bucket";

/** How long a lease may be spent, counted from when its isolate asked; the isolate stops at this. */
export const LEASE_SPEND_MS = 1000;
/** When the object ends a lease nobody settled: twice the spending window, so clock skew is harmless. */
export const LEASE_TTL_MS = 2 * LEASE_SPEND_MS;
/** Most tokens one lease holds. */
export const MAX_LEASE = 1000;
/** Most requests one charge of one key decides. */
const MAX_COUNT = 10_000;

/** What an isolate asks for with a charge. */
export interface LeaseRequest {
  /** Extra tokens wanted on lease (granted only if the whole batch was, and at most half of what is left). */
  want: number;
  /** Leases this isolate stopped spending, with the tokens it did not use. Settling twice is harmless. */
  settle: { id: string; unused: number }[];
}

export interface Lease {
  id: string;
  tokens: number;
}

export type BatchChargeResult = Omit<BatchDecision, "state"> & { lease?: Lease };

/** A bucket as stored: its state and the limit it was last charged under. */
export interface StoredBucket {
  state: BucketState;
  limit: Limit;
}

export interface ChargeOutcome {
  result: BatchChargeResult;
  /** The bucket to store. */
  next: BucketState;
  /** Leases that ended (expired or settled): delete them. */
  ended: string[];
  /** A lease granted now: store it, ending at `expiresAt`. */
  granted?: OpenLease;
  /** Tokens still out on leases, the new one included. */
  held: number;
}

/**
 * Decides `count` requests of one key that reached one isolate together, in order: the first
 * `granted` are admitted, the rest denied and charged nothing. First takes back the unused tokens of
 * settled leases, then, if all `count` were granted, may grant a lease of extra tokens. `count` may
 * be 0 (a lease alone). A stored bucket under another limit is rescaled, never reset.
 */
export function chargeBucket(
  stored: StoredBucket | null,
  limit: Limit,
  now: number,
  count: number,
  open: OpenLease[],
  lease?: LeaseRequest,
): ChargeOutcome {
  let state: BucketState;
  if (!stored) state = fullBucket(limit, now);
  else state = sameLimit(stored.limit, limit) ? stored.state : rescale(stored.state, stored.limit, limit, now);
  const leases = endLeases(state, limit, now, open, lease?.settle ?? [], LEASE_TTL_MS);
  const n = Number.isInteger(count) && count >= 0 ? Math.min(count, MAX_COUNT) : 1;
  const { state: next, ...decision } = takeMany(leases.state, limit, now, n, leases.held);
  let granted: OpenLease | undefined;
  const want = Math.min(MAX_LEASE, Math.floor(lease?.want ?? 0));
  if (want > 0 && decision.granted === n) {
    const tokens = Math.min(want, Math.floor(decision.remaining / 2));
    if (tokens > 0) {
      granted = { id: crypto.randomUUID(), tokens, expiresAt: now + LEASE_TTL_MS };
      next.tokens -= tokens;
      decision.remaining -= tokens;
    }
  }
  if (decision.granted < n && leases.held > limit.burst - 1) {
    // Every whole token is out on lease: the next one comes back when the first lease ends.
    decision.retryAfterMs = Math.max(decision.retryAfterMs, leases.firstEndsAt - now);
  }
  const result: BatchChargeResult = granted
    ? { ...decision, lease: { id: granted.id, tokens: granted.tokens } }
    : decision;
  return {
    result,
    next,
    ended: leases.ended,
    ...(granted ? { granted } : {}),
    held: leases.held + (granted?.tokens ?? 0),
  };
}

/**
 * When a bucket charged at `now` is full again and its row may be deleted: when it has refilled and
 * any lease on it has ended, but not sooner than `minDelayMs` (a busy bucket refills in
 * milliseconds, and deleting and recreating it on every pause would cost more than the row).
 * Infinity for a limit that never refills.
 */
export function fullAt(state: BucketState, limit: Limit, now: number, held: number, minDelayMs: number): number {
  if (limit.rate <= 0) return Number.POSITIVE_INFINITY;
  const refillMs = ((limit.burst - state.tokens) * limit.perMs) / limit.rate;
  const leaseMs = held > 0 ? LEASE_TTL_MS : 0;
  return Math.max(now + minDelayMs, Math.max(now, state.updatedAt) + Math.ceil(refillMs) + leaseMs);
}
