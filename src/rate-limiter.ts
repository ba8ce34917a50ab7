/**
 * RateLimiter — one Durable Object per bucket key (`publish:<sub>`, `token-issue:<ip>`, …), so load
 * spreads across objects and one hot key cannot slow the others.
 *
 * `charge` is synchronous from reading the bucket to writing it back (SQLite calls are synchronous in
 * a Durable Object), so concurrent requests are decided strictly one after another. The state is
 * written on every charge, so eviction or a restart never refills a bucket early. This object is the
 * bucket's only writer, so after the first read it decides from a copy in memory (one statement per
 * charge instead of three), written through on every charge and read again by a new instance.
 *
 * Leases: a hot isolate may take a few extra tokens with a charge and spend them itself, without a
 * round trip per request (src/limiter-gate.ts). A leased token is taken from this bucket when it is
 * granted, so nothing is admitted that the bucket did not hand out; and it still counts as in the
 * bucket until its lease ends, so the bucket refills only up to `burst − leased` and the burst bound
 * holds for any interval. A lease ends when its isolate settles it (unused tokens come back) or after
 * {@link LEASE_TTL_MS} (its tokens count as spent: an isolate that vanished can only under-admit).
 * An object at most grants half the whole tokens left after the batch, so others are never starved.
 *
 * Storage is bounded by activity: an alarm at the time the bucket is full again (its leases ended)
 * deletes everything, since a full bucket is exactly what a missing row means. A bucket that is not
 * full is never forgotten, so eviction still never refills one early (docs/operations.md).
 */
import { DurableObject } from "cloudflare:workers";
import { type Limit, sameLimit } from "./limits";
import {
  type BatchDecision,
  type BucketDecision,
  type BucketState,
  fullBucket,
  isFull,
  refill,
  rescale,
  takeMany,
} from "./token-bucket";

interface Row {
  [key: string]: SqlStorageValue;
  tokens: number;
  updated_at: number;
  rate: number;
  per_ms: number;
  burst: number;
}

export type ChargeResult = Omit<BucketDecision, "state">;

/** How long a lease may be spent, counted from when its isolate asked; the isolate stops at this. */
export const LEASE_SPEND_MS = 1000;
/** When this object ends a lease nobody settled: twice the spending window, so clock skew is harmless. */
export const LEASE_TTL_MS = 2 * LEASE_SPEND_MS;
/** The soonest a bucket's storage is reclaimed after a charge: see {@link RateLimiter.alarm}. */
const MIN_ALARM_DELAY_MS = 60_000;
/** Most tokens one lease holds. */
export const MAX_LEASE = 1000;

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

export class RateLimiter extends DurableObject<Env> {
  /** The stored bucket row as last written by this instance; undefined until first read. */
  private row: Row | null | undefined = undefined;
  /** Open lease rows; 0 lets a charge skip the lease table. */
  private openLeases: number;
  /** When the alarm is set for (null: none), as this instance set or read it. */
  private alarmAt: number | null = null;
  /** The alarm deleted everything; the tables come back with the next charge. */
  private wiped = false;

  constructor(ctx: DurableObjectState, env: Env) {
    super(ctx, env);
    this.createTables();
    this.openLeases = ctx.storage.sql.exec<{ n: number }>("SELECT COUNT(*) AS n FROM lease").one().n;
    ctx.blockConcurrencyWhile(async () => {
      this.alarmAt = await ctx.storage.getAlarm();
    });
  }

  private createTables(): void {
    const sql = this.ctx.storage.sql;
    sql.exec(`CREATE TABLE IF NOT EXISTS bucket (
      id INTEGER PRIMARY KEY CHECK (id = 1), tokens REAL NOT NULL, updated_at INTEGER NOT NULL,
      rate INTEGER NOT NULL, per_ms REAL NOT NULL, burst INTEGER NOT NULL)`);
    sql.exec(`CREATE TABLE IF NOT EXISTS lease (
      id TEXT PRIMARY KEY, tokens INTEGER NOT NULL, expires_at INTEGER NOT NULL)`);
  }

  /**
   * The bucket is due to be full: if it is (and no lease is open), delete everything; otherwise look
   * again when it will be. Expired leases end here too, their tokens spent, and the state that
   * results is stored so nothing refills past them later.
   */
  override async alarm(): Promise<void> {
    this.alarmAt = null;
    if (this.wiped) return;
    const now = Date.now();
    const row = this.readRow();
    if (row) {
      const limit: Limit = { rate: row.rate, perMs: row.per_ms, burst: row.burst };
      const { state, held } = this.endLeases({ tokens: row.tokens, updatedAt: row.updated_at }, limit, now, []);
      if (held > 0 || !isFull(state, limit, now)) {
        this.writeRow(state, limit);
        this.scheduleFull(state, limit, now);
        return;
      }
    }
    // Issued and marked in one synchronous step: a charge that runs while they settle recreates
    // the tables instead of writing to ones that are gone.
    const deleted = Promise.all([this.ctx.storage.deleteAlarm(), this.ctx.storage.deleteAll()]);
    this.wiped = true;
    this.row = null;
    this.openLeases = 0;
    await deleted;
  }

  /** Takes one token from this bucket under `limit`. `now` defaults to this object's clock. */
  charge(limit: Limit, now: number = Date.now()): ChargeResult {
    const { granted, ...rest } = this.chargeMany(limit, 1, now);
    return { allowed: granted === 1, ...rest };
  }

  /**
   * Decides `count` requests that reached one Worker isolate together (see LimiterGate): the first
   * `granted` are admitted, the rest denied and charged nothing. With `lease`, first takes back the
   * unused tokens of settled leases, then, if all `count` were granted, may grant a lease of extra
   * tokens. `count` may be 0 (a lease alone).
   */
  chargeMany(limit: Limit, count: number, now: number = Date.now(), lease?: LeaseRequest): BatchChargeResult {
    const sql = this.ctx.storage.sql;
    if (this.wiped) {
      this.wiped = false;
      this.createTables();
    }
    const row = this.readRow();
    let state: BucketState;
    if (!row) {
      state = fullBucket(limit, now);
    } else {
      state = { tokens: row.tokens, updatedAt: row.updated_at };
      const stored: Limit = { rate: row.rate, perMs: row.per_ms, burst: row.burst };
      if (!sameLimit(stored, limit)) {
        state = rescale(state, stored, limit, now);
      }
    }
    const leases = this.endLeases(state, limit, now, lease?.settle ?? []);
    state = leases.state;
    const n = Number.isInteger(count) && count >= 0 ? Math.min(count, 10_000) : 1;
    const { state: next, ...decision } = takeMany(state, limit, now, n, leases.held);
    let leased: Lease | undefined;
    const want = Math.min(MAX_LEASE, Math.floor(lease?.want ?? 0));
    if (want > 0 && decision.granted === n) {
      const tokens = Math.min(want, Math.floor(decision.remaining / 2));
      if (tokens > 0) {
        leased = { id: crypto.randomUUID(), tokens };
        next.tokens -= tokens;
        decision.remaining -= tokens;
        sql.exec("INSERT INTO lease (id, tokens, expires_at) VALUES (?, ?, ?)", leased.id, tokens, now + LEASE_TTL_MS);
        this.openLeases++;
      }
    }
    if (decision.granted < n && leases.held > limit.burst - 1) {
      // Every whole token is out on lease: the next one comes back when the first lease ends.
      decision.retryAfterMs = Math.max(decision.retryAfterMs, leases.firstEndsAt - now);
    }
    this.writeRow(next, limit);
    this.scheduleFull(next, limit, now);
    return leased ? { ...decision, lease: leased } : decision;
  }

  private readRow(): Row | null {
    if (this.row === undefined) {
      this.row = this.ctx.storage.sql.exec<Row>("SELECT * FROM bucket WHERE id = 1").toArray()[0] ?? null;
    }
    return this.row;
  }

  private writeRow(state: BucketState, limit: Limit): void {
    this.ctx.storage.sql.exec(
      "INSERT OR REPLACE INTO bucket (id, tokens, updated_at, rate, per_ms, burst) VALUES (1, ?, ?, ?, ?, ?)",
      state.tokens,
      state.updatedAt,
      limit.rate,
      limit.perMs,
      limit.burst,
    );
    this.row = {
      tokens: state.tokens,
      updated_at: state.updatedAt,
      rate: limit.rate,
      per_ms: limit.perMs,
      burst: limit.burst,
    };
  }

  /**
   * Sets the alarm for when the bucket will be full again, counting open leases as ending at their
   * latest. Never moves an earlier alarm later: one that fires early just looks again.
   */
  private scheduleFull(state: BucketState, limit: Limit, now: number): void {
    if (limit.rate <= 0) return; // never refills: the row is the bucket
    const refillMs = ((limit.burst - state.tokens) * limit.perMs) / limit.rate;
    const leaseMs = this.openLeases > 0 ? LEASE_TTL_MS : 0;
    // The alarm judges on the real clock, so a charge made on another one (`now` is a parameter, for
    // tests) schedules nothing: the real clock would find its bucket full at once.
    if (Math.abs(now - Date.now()) > 1000) return;
    // At least a minute out: a busy bucket refills in milliseconds, and deleting and recreating it
    // on every pause would cost more than the row.
    const at = Math.max(now + MIN_ALARM_DELAY_MS, Math.max(now, state.updatedAt) + Math.ceil(refillMs) + leaseMs);
    if (this.alarmAt !== null && this.alarmAt <= at) return;
    this.alarmAt = at;
    this.ctx.storage.setAlarm(at).catch((e: unknown) => {
      this.alarmAt = null;
      console.error("floodgate: could not set the limiter's alarm", e instanceof Error ? e.message : e);
    });
  }

  /**
   * Ends expired leases (their tokens count as spent) and settled ones (their unused tokens come
   * back, refilled first so they are not capped twice). Returns the state and what is still held.
   */
  private endLeases(
    state: BucketState,
    limit: Limit,
    now: number,
    settle: LeaseRequest["settle"],
  ): { state: BucketState; held: number; firstEndsAt: number } {
    if (this.openLeases === 0) return { state, held: 0, firstEndsAt: now };
    const sql = this.ctx.storage.sql;
    const open = sql.exec<{ id: string; tokens: number; expires_at: number }>("SELECT * FROM lease").toArray();
    this.openLeases = open.length;
    let held = open.reduce((a, l) => a + l.tokens, 0);
    // Refill under the old hold before any lease ends, so the bucket never over-fills.
    let tokens = refill(state, limit, now, held);
    const settled = new Map(settle.map((s) => [s.id, s.unused]));
    for (const l of open) {
      const expired = l.expires_at <= now;
      const unused = settled.get(l.id);
      if (!expired && unused === undefined) continue;
      sql.exec("DELETE FROM lease WHERE id = ?", l.id);
      this.openLeases--;
      held -= l.tokens;
      if (!expired && unused !== undefined) tokens += Math.max(0, Math.min(l.tokens, Math.floor(unused)));
    }
    const firstEndsAt = Math.min(
      now + LEASE_TTL_MS,
      ...open.filter((l) => l.expires_at > now && !settled.has(l.id)).map((l) => l.expires_at),
    );
    return {
      state: { tokens: Math.min(tokens, limit.burst - held), updatedAt: Math.max(now, state.updatedAt) },
      held,
      firstEndsAt,
    };
  }

  /** The stored bucket, for tests and diagnostics. */
  peek(): { tokens: number; updatedAt: number } | null {
    if (this.wiped) return null;
    const row = this.ctx.storage.sql.exec<Row>("SELECT * FROM bucket WHERE id = 1").toArray()[0];
    return row ? { tokens: row.tokens, updatedAt: row.updated_at } : null;
  }
}
