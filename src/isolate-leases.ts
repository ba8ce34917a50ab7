/**
 * The leases one isolate holds, and the demand that asks for them (docs/operations.md, "Token
 * leases"): for a hot key (at least {@link LEASE_MIN_DEMAND} requests in this isolate over the last
 * 250–500 ms), a charge also asks for that many extra tokens, and later requests spend them here with
 * no object call at all until they run out or {@link LEASE_SPEND_MS} has passed. The object takes
 * leased tokens from the bucket when it grants them and keeps counting them as in the bucket until
 * they are settled, so leases never admit what the bucket would not (src/bucket-charge.ts). A lease
 * this isolate stops spending is settled with the next call for its key.
 */
import { BoundedMap } from "../functions/bounded-map";
import { LEASE_SPEND_MS, type Lease, type LeaseRequest } from "./bucket-charge";

/** Requests for one key seen in this isolate over the last 250–500 ms before a charge asks for a lease. */
export const LEASE_MIN_DEMAND = 4;
const DEMAND_WINDOW_MS = 250;
/** Most keys whose leases and demand this isolate tracks; beyond it they are forgotten (leases expire). */
const MAX_TRACKED_KEYS = 10_000;
/** Most leases waiting to be settled per key; older ones simply expire in the object. */
const MAX_SETTLE = 100;

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

/** One token spent from a lease: what the bucket holds after it, counting the lease's rest. */
export interface LeaseSpend {
  remaining: number;
  fullAt: number;
}

export class IsolateLeases {
  private readonly keys = new BoundedMap<string, KeyState>(MAX_TRACKED_KEYS);

  /** Counts one request for `id` (a key and its limit) toward its demand. */
  note(id: string, now: number): void {
    this.state(id, now).seen++;
  }

  /**
   * Takes one token from a lease held for `id`, or returns null when none has a token left. Leases
   * past their spending window, or spent out, are queued to be settled.
   */
  spend(id: string, now: number): LeaseSpend | null {
    const state = this.state(id, now);
    while (state.leases.length > 0) {
      const lease = state.leases[0] as HeldLease;
      if (lease.until > now && lease.left > 0) {
        lease.left--;
        if (lease.left === 0) this.retire(state);
        return { remaining: lease.objectRemaining + lease.left, fullAt: lease.fullAt };
      }
      this.retire(state);
    }
    return null;
  }

  /** What a charge for `id` sent at `now` asks for: a lease if the key is hot, and the leases to settle. */
  request(id: string, now: number): LeaseRequest {
    const state = this.state(id, now);
    const demand = state.seen + state.seenBefore;
    return { want: demand >= LEASE_MIN_DEMAND ? demand : 0, settle: state.settle.splice(0) };
  }

  /** A charge failed: its leases to settle go again with the next one (settling is idempotent). */
  retry(id: string, settle: LeaseRequest["settle"], now: number): void {
    this.state(id, now).settle.push(...settle);
  }

  /** Holds a lease granted to a charge sent at `sentAt`; spend it until {@link LEASE_SPEND_MS} later. */
  hold(id: string, lease: Lease, sentAt: number, objectRemaining: number, fullAt: number): void {
    this.state(id, sentAt).leases.push({
      id: lease.id,
      left: lease.tokens,
      until: sentAt + LEASE_SPEND_MS,
      objectRemaining,
      fullAt,
    });
  }

  /** This key's state, with the demand window moved on to `now`. */
  private state(id: string, now: number): KeyState {
    const state = this.keys.getOrSet(id, () => ({ leases: [], settle: [], windowStart: now, seen: 0, seenBefore: 0 }));
    const elapsed = now - state.windowStart;
    if (elapsed >= DEMAND_WINDOW_MS) {
      state.seenBefore = elapsed < 2 * DEMAND_WINDOW_MS ? state.seen : 0;
      state.seen = 0;
      state.windowStart = now;
    }
    return state;
  }

  /** Stops spending the oldest lease; its unused tokens go back with the next call (or it expires). */
  private retire(state: KeyState): void {
    const lease = state.leases.shift();
    if (!lease) return;
    state.settle.push({ id: lease.id, unused: lease.left });
    // Unsettled leases simply expire in the object, counted as spent: a bound on memory, not on safety.
    if (state.settle.length > MAX_SETTLE) state.settle.shift();
  }
}
