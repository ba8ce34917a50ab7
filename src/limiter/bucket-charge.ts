/**
 * One charge of one bucket, leases included: what a limiter object decides for a key, pure, with the
 * stored state, the open leases and the clock as arguments. The shard objects (src/limiter/limiter-shard.ts)
 * store the result; this decides it.
 *
 * Leases: a hot isolate may take a few extra tokens with a charge and spend them itself, without a
 * round trip per request (src/limiter/limiter-gate.ts). A leased token is taken from the bucket when it is
 * granted, so nothing is admitted that the bucket did not hand out; and it still counts as in the
 * bucket until its lease ends, so the bucket refills only up to `burst − leased` and the burst bound
 * holds for any interval. A lease ends when its isolate settles it (unused tokens come back) or after
 * {@link LEASE_TTL_MS} (its tokens count as spent: an isolate that vanished can only under-admit).
 * An object at most grants half the whole tokens left after the batch, so others are never starved.
 *
 * Spare leases (docs/operations.md, "Token leases"): a key at low demand, whose isolate sees too few
 * requests to ask for a lease, still costs an object call per request; so an isolate may accept a
 * small spare lease with any charge, spent over {@link SPARE_LEASE_SPEND_MS}. It holds only whole
 * tokens above the floor, half the burst: after the grant at least `burst / 2` tokens stay in the
 * bucket, and since leased tokens keep counting as in it, every spare lease of a key together never
 * holds more than the half above the floor. So another isolate can always be admitted at least half
 * the burst at once (plus the refill), and nothing is denied that the bucket alone would have
 * admitted until demand elsewhere has spent the bucket down past the floor.
 */
import { type Limit, sameLimit } from "../settings/limits";
import {
  type BatchDecision,
  type BucketState,
  endLeases,
  fullBucket,
  type OpenLease,
  refund,
  rescale,
  takeAll,
  takeMany,
} from "./token-bucket";

/** How long a lease may be spent, counted from when its isolate asked; the isolate stops at this. */
export const LEASE_SPEND_MS = 1000;
/** When the object ends a lease nobody settled: twice the spending window, so clock skew is harmless. */
export const LEASE_TTL_MS = 2 * LEASE_SPEND_MS;
/** Most tokens one lease holds. */
export const MAX_LEASE = 1000;
/**
 * How long a spare lease (low demand) may be spent. Longer than {@link LEASE_SPEND_MS}: a subject
 * publishing once a second spends one token a second, so the window sets how often it calls its
 * object (once per window, or per {@link SPARE_LEASE_MAX} publishes if that comes first: at most
 * 100 calls per 1,000 publishes from once a second up). Its tokens are above the floor, so holding
 * them longer only delays when the unused ones come back (settled with this isolate's next call to
 * the shard, or when the lease ends in the object, twice this later).
 */
export const SPARE_LEASE_SPEND_MS = 10_000;
/** Most tokens one spare lease holds: a few seconds of a subject publishing now and then. */
export const SPARE_LEASE_MAX = 16;
/** The longest any lease stays open in its object (a spare one: twice its spending window). */
export const MAX_LEASE_TTL_MS = 2 * SPARE_LEASE_SPEND_MS;
/** Most requests one charge of one key decides. */
const MAX_COUNT = 10_000;

/** What an isolate asks for with a charge. */
export interface LeaseRequest {
  /** Extra tokens wanted on lease (granted only if the whole batch was, and at most half of what is left). */
  want: number;
  /** Leases this isolate stopped spending, with the tokens it did not use. Settling twice is harmless. */
  settle: { id: string; unused: number }[];
  /**
   * With `want` 0: also take a spare lease of the whole tokens above half the burst (at most
   * {@link SPARE_LEASE_MAX}), if the whole batch was granted. An isolate on older code never sends it.
   */
  spare?: boolean;
}

export interface Lease {
  id: string;
  tokens: number;
  /** How long the isolate may spend it, from when it sent the charge; absent: {@link LEASE_SPEND_MS}. */
  spendMs?: number;
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
 * settled leases and the `refunded` tokens of earlier requests that turned out not to owe them, then,
 * if all `count` were granted, may grant a lease of extra tokens. `count` may be 0 (a lease or a
 * refund alone). `whole`: the `count` tokens are one request's, all granted or none taken
 * ({@link takeAll}). A stored bucket under another limit is rescaled, never reset.
 */
export function chargeBucket(
  stored: StoredBucket | null,
  limit: Limit,
  now: number,
  count: number,
  open: OpenLease[],
  lease?: LeaseRequest,
  refunded = 0,
  whole = false,
): ChargeOutcome {
  let state: BucketState;
  if (!stored) state = fullBucket(limit, now);
  else state = sameLimit(stored.limit, limit) ? stored.state : rescale(stored.state, stored.limit, limit, now);
  const leases = endLeases(state, limit, now, open, lease?.settle ?? [], LEASE_TTL_MS);
  const back = refund(leases.state, limit, now, Math.min(refunded, MAX_COUNT), leases.held);
  const n = Number.isInteger(count) && count >= 0 ? Math.min(count, MAX_COUNT) : 1;
  const { state: next, ...decision } = (whole ? takeAll : takeMany)(back, limit, now, n, leases.held);
  let granted: OpenLease | undefined;
  let spendMs: number | undefined;
  const want = Math.min(MAX_LEASE, Math.floor(lease?.want ?? 0));
  if (want > 0 && decision.granted === n) {
    const tokens = Math.min(want, Math.floor(decision.remaining / 2));
    if (tokens > 0) granted = { id: crypto.randomUUID(), tokens, expiresAt: now + LEASE_TTL_MS };
  } else if (want <= 0 && lease?.spare === true && n > 0 && decision.granted === n) {
    const tokens = spareTokens(next.tokens, limit);
    if (tokens > 0) {
      spendMs = SPARE_LEASE_SPEND_MS;
      granted = { id: crypto.randomUUID(), tokens, expiresAt: now + 2 * SPARE_LEASE_SPEND_MS };
    }
  }
  if (granted) {
    next.tokens -= granted.tokens;
    decision.remaining -= granted.tokens;
  }
  if (decision.granted < n && leases.held > limit.burst - (whole ? n : 1)) {
    // The tokens wanted are out on lease: the next come back when the first lease ends.
    decision.retryAfterMs = Math.max(decision.retryAfterMs, leases.firstEndsAt - now);
  }
  const result: BatchChargeResult = granted
    ? { ...decision, lease: { id: granted.id, tokens: granted.tokens, ...(spendMs ? { spendMs } : {}) } }
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
 * The whole tokens a spare lease may take from a bucket holding `tokens` (leased ones not counted):
 * those above the floor of half the burst, so at least `burst / 2` stay in the bucket.
 */
export function spareTokens(tokens: number, limit: Limit): number {
  return Math.max(0, Math.min(SPARE_LEASE_MAX, Math.floor(tokens - limit.burst / 2 + 1e-9)));
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
  const leaseMs = held > 0 ? MAX_LEASE_TTL_MS : 0;
  return Math.max(now + minDelayMs, Math.max(now, state.updatedAt) + Math.ceil(refillMs) + leaseMs);
}
