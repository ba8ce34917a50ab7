/**
 * The leases one isolate holds, and the demand that asks for them (docs/operations.md, "Token
 * leases"): for a hot key (at least {@link LEASE_MIN_DEMAND} requests in this isolate over the last
 * 250–500 ms), a charge also asks for that many extra tokens, and later requests spend them here with
 * no object call at all until they run out or {@link LEASE_SPEND_MS} has passed. The object takes
 * leased tokens from the bucket when it grants them and keeps counting them as in the bucket until
 * they are settled, so leases never admit what the bucket would not (src/limiter/bucket-charge.ts). At low
 * demand a publish charge accepts a spare lease instead (tokens above half the burst, spent over
 * `SPARE_LEASE_SPEND_MS` in src/limiter/bucket-charge.ts), so a subject publishing now and then
 * calls its object about once per window — from its first publish on: a crowd that arrives cold
 * (each subject publishing a few times) then costs one call per subject, not one per publish. Only
 * for the publish bucket, whose keys are verified subjects (a token names them): an unsettled lease's
 * tokens are not given back (they refill at the bucket's rate), so read, subscribe and token-issue
 * keys — a one-shot reader or minter, or client IPs an outsider picks — never have tokens parked here.
 *
 * Settling costs no call of its own: a lease this isolate stops spending is settled with its next
 * call to the lease's shard, whatever keys that call is for ({@link IsolateLeases.settlesFor}), or it
 * simply ends in the object when it expires.
 */
import { BoundedMap } from "../../functions/bounded-map";
import { MinHeap } from "../../functions/min-heap";
import type { Limit } from "../settings/limits";
import { LEASE_SPEND_MS, type Lease, type LeaseRequest } from "./bucket-charge";

/** Requests for one key seen in this isolate over the last 250–500 ms before a charge asks for a lease. */
export const LEASE_MIN_DEMAND = 4;
const DEMAND_WINDOW_MS = 250;
/** Most keys whose leases and demand this isolate tracks; beyond it they are forgotten (leases expire). */
const MAX_TRACKED_KEYS = 10_000;
/** Most leases waiting to be settled per key; older ones simply expire in the object. */
const MAX_SETTLE = 100;
/** Most other keys' settles one shard call carries; the rest go with the next call, or expire. */
const MAX_SETTLE_KEYS_PER_CALL = 64;
/**
 * Most leases one shard's index of spending windows holds. Every call to the shard takes out those
 * whose window has passed, so it holds the leases granted over the last spending window (10 s for a
 * spare one): one per tracked key of the shard for a crowd, several for a key that is hot (a new
 * lease a second) — four per tracked key is room for both. Past it a lease goes unindexed: its key's
 * own next request retires it, to be settled with the next call to its shard, or it expires in the
 * object.
 */
export const MAX_INDEXED_LEASES_PER_SHARD = 4 * MAX_TRACKED_KEYS;
/** Most keys one shard's set of keys owing a settle holds; past it a key settles with its own next call. */
const MAX_READY_KEYS_PER_SHARD = MAX_TRACKED_KEYS;

/** Where a key's leases go back: its shard, key and limit. */
export interface LeaseHome {
  shard: string;
  key: string;
  limit: Limit;
}

/** Leases of one key to settle on the way, with a call to its shard made for other keys. */
export interface PendingSettle {
  id: string;
  home: LeaseHome;
  settle: LeaseRequest["settle"];
}

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
  /**
   * Earliest `until` first: spent in that order, and so whatever window has passed is at the front
   * (a key can hold a spare lease and a hot one, granted to charges in flight together).
   */
  leases: HeldLease[];
  settle: LeaseRequest["settle"];
  windowStart: number;
  seen: number;
  seenBefore: number;
  /** Set once a lease is held: where it is settled. */
  home?: LeaseHome;
}

/** When a key's lease stops being spent (isolate clock). */
interface LeaseDue {
  until: number;
  id: string;
}

/**
 * Per shard, what a call to it may settle for other keys: each lease held there by when its spending
 * window ends, and the keys whose retired leases wait to be settled. A call takes out only what is
 * due, so its cost does not grow with the leases still being spent (a cold crowd holds a spare lease
 * per subject for 10 s: thousands per shard, which a scan of every holder visited on every call).
 */
interface ShardOwing {
  due: MinHeap<LeaseDue>;
  ready: Set<string>;
}

/** One token spent from a lease: what the bucket holds after it, counting the lease's rest. */
export interface LeaseSpend {
  remaining: number;
  fullAt: number;
}

export class IsolateLeases {
  private readonly keys = new BoundedMap<string, KeyState>(MAX_TRACKED_KEYS);
  /** Per shard, the leases held and owed there: what a call to that shard may settle. */
  private readonly owing = new Map<string, ShardOwing>();

  /** Counts a request for `id` (a key and its limit) toward its demand: `tokens`, what it takes. */
  note(id: string, now: number, tokens = 1): void {
    this.state(id, now).seen += tokens;
  }

  /**
   * Takes `tokens` from the leases held for `id` (earliest-ending first), or returns null and takes
   * none when together they hold fewer. Leases past their spending window, or spent out, are queued
   * to be settled.
   */
  spend(id: string, now: number, tokens = 1): LeaseSpend | null {
    const state = this.state(id, now);
    // Leases are in `until` order: once the front one may be spent, so may every one after it.
    while (state.leases.length > 0 && (state.leases[0] as HeldLease).until <= now) this.retire(id, state);
    let held = 0;
    for (const lease of state.leases) held += lease.left;
    if (held < tokens || state.leases.length === 0) return null;
    let need = tokens;
    let last = state.leases[0] as HeldLease;
    while (need > 0) {
      last = state.leases[0] as HeldLease;
      const taken = Math.min(need, last.left);
      last.left -= taken;
      need -= taken;
      if (last.left === 0) this.retire(id, state);
    }
    return { remaining: last.objectRemaining + last.left, fullAt: last.fullAt };
  }

  /**
   * Stops spending every lease of `id`, its unused tokens to be settled with the next charge of the
   * key: a request needs more tokens at once than they hold, and they must be back in the bucket
   * when it is decided.
   */
  retireAll(id: string, now: number): void {
    const state = this.state(id, now);
    while (state.leases.length > 0) this.retire(id, state);
  }

  /**
   * Puts `tokens` that a request took and did not use back on a lease of `id` still being spent (the
   * one ending last), so this isolate spends them again; false when none is, and nothing is put back.
   * Only tokens taken from the bucket come back, so every lease together still spends no more than
   * the bucket handed out (a settle returns at most a lease's own tokens: the surplus is lost, never
   * admitted twice).
   */
  giveBack(id: string, now: number, tokens: number): boolean {
    const lease = this.keys.peek(id)?.leases.at(-1);
    if (!lease || lease.until <= now) return false;
    lease.left += tokens;
    return true;
  }

  /**
   * What a charge for `id` sent at `now` asks for: a lease if the key is hot, else a spare lease if
   * `spareAllowed` (the publish bucket), its first charge included; and the leases to settle.
   */
  request(id: string, now: number, spareAllowed: boolean): LeaseRequest {
    const state = this.state(id, now);
    const demand = state.seen + state.seenBefore;
    const settle = state.settle.splice(0);
    if (demand >= LEASE_MIN_DEMAND) return { want: demand, settle };
    return spareAllowed ? { want: 0, settle, spare: true } : { want: 0, settle };
  }

  /**
   * The leases to settle with a call to `shard` that is not for them: of keys other than `except`,
   * each lease past its spending window (retired now) or already retired and not yet settled.
   */
  settlesFor(shard: string, except: Set<string>, now: number): PendingSettle[] {
    const owing = this.owing.get(shard);
    if (!owing) return [];
    for (let next = owing.due.peek(); next && next.until <= now; next = owing.due.peek()) {
      owing.due.pop();
      // A look is not a use: it must not keep idle keys tracked. A forgotten key's leases expire in
      // the object. Leases are in `until` order, so every one whose window has passed is at the
      // front (none, when its own requests already retired it).
      const state = this.keys.peek(next.id);
      if (!state?.home) continue;
      while (state.leases.length > 0 && (state.leases[0] as HeldLease).until <= now) this.retire(next.id, state);
    }
    const out: PendingSettle[] = [];
    for (const id of owing.ready) {
      if (out.length >= MAX_SETTLE_KEYS_PER_CALL) break;
      if (except.has(id)) continue; // the call's own keys settle with their own charge
      owing.ready.delete(id);
      const state = this.keys.peek(id);
      if (state?.home && state.settle.length > 0) out.push({ id, home: state.home, settle: state.settle.splice(0) });
    }
    return out;
  }

  /** A charge failed: its leases to settle go again with the next one (settling is idempotent). */
  retry(id: string, settle: LeaseRequest["settle"], now: number): void {
    this.owe(id, this.state(id, now), settle);
  }

  /**
   * Holds a lease granted to a charge sent at `sentAt`; spend it until its spending window (the
   * lease's `spendMs`, else {@link LEASE_SPEND_MS}) has passed. `home`: where it is settled.
   */
  hold(id: string, lease: Lease, sentAt: number, objectRemaining: number, fullAt: number, home: LeaseHome): void {
    const state = this.state(id, sentAt);
    const until = sentAt + (lease.spendMs ?? LEASE_SPEND_MS);
    let at = state.leases.length;
    while (at > 0 && (state.leases[at - 1] as HeldLease).until > until) at--;
    state.leases.splice(at, 0, { id: lease.id, left: lease.tokens, until, objectRemaining, fullAt });
    state.home = home;
    const owing = this.shard(home.shard);
    if (owing.due.size < MAX_INDEXED_LEASES_PER_SHARD) owing.due.push({ until, id });
  }

  private shard(shard: string): ShardOwing {
    let owing = this.owing.get(shard);
    if (!owing) {
      owing = { due: new MinHeap((a, b) => a.until < b.until), ready: new Set() };
      this.owing.set(shard, owing);
    }
    return owing;
  }

  /**
   * Adds leases to settle for a key, the newest {@link MAX_SETTLE} kept, and marks the key so the next
   * call to its shard for other keys carries them.
   */
  private owe(id: string, state: KeyState, settle: LeaseRequest["settle"]): void {
    state.settle.push(...settle);
    // Unsettled leases simply expire in the object, counted as spent: a bound on memory, not on safety.
    if (state.settle.length > MAX_SETTLE) state.settle.splice(0, state.settle.length - MAX_SETTLE);
    if (!state.home || state.settle.length === 0) return;
    const { ready } = this.shard(state.home.shard);
    if (ready.size < MAX_READY_KEYS_PER_SHARD) ready.add(id);
  }

  /** This key's state, with the demand window moved on to `now`. */
  private state(id: string, now: number): KeyState {
    const state = this.keys.getOrSet(id, () => ({
      leases: [],
      settle: [],
      windowStart: now,
      seen: 0,
      seenBefore: 0,
    }));
    const elapsed = now - state.windowStart;
    if (elapsed >= DEMAND_WINDOW_MS) {
      state.seenBefore = elapsed < 2 * DEMAND_WINDOW_MS ? state.seen : 0;
      state.seen = 0;
      state.windowStart = now;
    }
    return state;
  }

  /** Stops spending the first lease; its unused tokens go back with the next call (or it expires). */
  private retire(id: string, state: KeyState): void {
    const lease = state.leases.shift();
    if (lease) this.owe(id, state, [{ id: lease.id, unused: lease.left }]);
  }
}
