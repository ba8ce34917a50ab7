/**
 * LimiterShard — one Durable Object holds the buckets of every key that hashes to it
 * (`shardOf(key)`, {@link LIMITER_SHARDS} objects in all), so one call decides a batch of charges
 * for many different keys: a crowd of subjects costs about what one subject costs
 * (docs/operations.md, "Rate-limit shards").
 *
 * Strict per key: `decide` is synchronous from reading the first bucket to writing
 * the last (SQLite calls are synchronous in a Durable Object), so concurrent batches are decided one
 * after another, each key's requests in arrival order, each key's tokens only its own; every
 * charge is written before the answer leaves, so eviction or a restart never refills a bucket early.
 * The object is each of its buckets' only writer, so after a key's first read it decides from a copy
 * in memory, written through on every charge.
 *
 * Storage is bounded by activity: a bucket whose row says it is full again (refilled, leases ended)
 * is deleted by the alarm, per key; a full bucket is exactly what a missing row means.
 */
import { DurableObject } from "cloudflare:workers";
import { AlarmScheduler } from "../platform/alarm-scheduler";
import { limiterShardStub } from "../platform/stubs";
import type { Limit } from "../settings/limits";
import { type BatchChargeResult, chargeBucket, fullAt, type LeaseRequest, type StoredBucket } from "./bucket-charge";
import { createLimiterTables } from "./schema";
import { type BucketState, endLeases, isFull, type OpenLease } from "./token-bucket";

/**
 * How many shard objects hold the buckets. A key's shard is fixed by this number, so changing it
 * moves keys between shards, and every moved key would start full in its new shard: once deployed, do
 * not change it without moving the buckets too. See docs/operations.md, "Rate-limit shards", for how
 * it was chosen.
 */
export const LIMITER_SHARDS = 8;

/** The shard that holds `key`'s bucket: FNV-1a of the key, modulo {@link LIMITER_SHARDS}. */
export function shardOf(key: string): number {
  let h = 0x811c9dc5;
  for (let i = 0; i < key.length; i++) {
    h ^= key.charCodeAt(i);
    h = Math.imul(h, 0x01000193);
  }
  return (h >>> 0) % LIMITER_SHARDS;
}

/** The name of shard `i`'s object. */
export function shardName(i: number): string {
  return `shard:${i}`;
}

/** The stub of the shard that holds `key`'s bucket. */
export function shardStub(env: Env, key: string): DurableObjectStub<LimiterShard> {
  return limiterShardStub(env, shardName(shardOf(key)));
}

/** The soonest a bucket's row is deleted after a charge: see {@link fullAt}. */
const MIN_ALARM_DELAY_MS = 60_000;
/** Most rows one alarm looks at; more wait for the next alarm, set at once. */
const ALARM_BATCH = 500;
/** Most buckets kept in memory; past it the copy is dropped and read again as needed. */
const MAX_CACHED = 50_000;

/** One key's charge in a batch: `count` requests of `key` under `limit`, in arrival order. */
export interface KeyCharge {
  key: string;
  limit: Limit;
  count: number;
  lease?: LeaseRequest;
  /**
   * Tokens given back before `count` is charged: earlier requests of this key were charged and
   * turned out not to owe theirs (the right admin bearer). Capped at the burst, less what is on lease.
   */
  refund?: number;
  /**
   * The `count` tokens are one request's (every copy of one Pusher event): granted all together or
   * none taken. Such an entry is never merged with other requests of its key.
   */
  whole?: boolean;
  /**
   * Only settles `lease.settle` (carried by a call made for other keys): charges nothing, grants no
   * lease, and does nothing for a key this shard holds no bucket for (its leases have ended).
   */
  settleOnly?: boolean;
}

interface Row {
  [key: string]: SqlStorageValue;
  key: string;
  tokens: number;
  updated_at: number;
  rate: number;
  per_ms: number;
  burst: number;
  full_at: number;
}

export class LimiterShard extends DurableObject<Env> {
  /** Buckets as last written by this instance; null: known to have no row. */
  private readonly rows = new Map<string, Row | null>();
  /** Keys with open lease rows, and how many; a key not here skips the lease table. */
  private readonly openLeases = new Map<string, number>();
  /** The one alarm, set for the earliest time a bucket is due to be full. */
  private readonly alarms: AlarmScheduler;

  constructor(ctx: DurableObjectState, env: Env) {
    super(ctx, env);
    const sql = ctx.storage.sql;
    createLimiterTables(sql);
    for (const r of sql.exec<{ key: string; n: number }>("SELECT key, COUNT(*) AS n FROM lease GROUP BY key")) {
      this.openLeases.set(r.key, r.n);
    }
    this.alarms = new AlarmScheduler(ctx.storage, "the limiter shard's alarm");
    ctx.blockConcurrencyWhile(() => this.alarms.load());
  }

  /**
   * Decides a batch of charges for different keys (each key at most once, with its requests'
   * count, besides its `whole` entries), every key strictly against its own bucket, entries in order. `now` defaults to this object's clock.
   */
  decide(charges: KeyCharge[], now?: number): BatchChargeResult[] {
    const at = now ?? Date.now();
    return charges.map((c) => (c.settleOnly ? this.settleKey(c, at) : this.chargeKey(c, at)));
  }

  private chargeKey(c: KeyCharge, now: number): BatchChargeResult {
    const row = this.readRow(c.key);
    const stored: StoredBucket | null = row
      ? {
          state: { tokens: row.tokens, updatedAt: row.updated_at },
          limit: { rate: row.rate, perMs: row.per_ms, burst: row.burst },
        }
      : null;
    const outcome = chargeBucket(
      stored,
      c.limit,
      now,
      c.count,
      this.leasesOf(c.key),
      c.lease,
      c.refund,
      c.whole === true,
    );
    const sql = this.ctx.storage.sql;
    for (const id of outcome.ended) sql.exec("DELETE FROM lease WHERE id = ?", id);
    let leases = (this.openLeases.get(c.key) ?? 0) - outcome.ended.length;
    if (outcome.granted) {
      const g = outcome.granted;
      sql.exec(
        "INSERT INTO lease (id, key, tokens, expires_at) VALUES (?, ?, ?, ?)",
        g.id,
        c.key,
        g.tokens,
        g.expiresAt,
      );
      leases++;
    }
    if (leases > 0) this.openLeases.set(c.key, leases);
    else this.openLeases.delete(c.key);
    this.writeRow(c.key, outcome.next, c.limit, now, outcome.held);
    return outcome.result;
  }

  /**
   * Settles leases of a key this call was not made for, under the limit its bucket is stored with (a
   * settle never rescales it); a key with no open lease here has none to settle.
   */
  private settleKey(c: KeyCharge, now: number): BatchChargeResult {
    const row = this.openLeases.has(c.key) ? this.readRow(c.key) : null;
    if (!row) return { granted: 0, remaining: 0, retryAfterMs: 0, fullInMs: 0 };
    const limit: Limit = { rate: row.rate, perMs: row.per_ms, burst: row.burst };
    return this.chargeKey({ key: c.key, limit, count: 0, lease: { want: 0, settle: c.lease?.settle ?? [] } }, now);
  }

  private leasesOf(key: string): OpenLease[] {
    if (!this.openLeases.has(key)) return [];
    return this.ctx.storage.sql
      .exec<{ id: string; tokens: number; expires_at: number }>(
        "SELECT id, tokens, expires_at FROM lease WHERE key = ?",
        key,
      )
      .toArray()
      .map((l) => ({ id: l.id, tokens: l.tokens, expiresAt: l.expires_at }));
  }

  private readRow(key: string): Row | null {
    let row = this.rows.get(key);
    if (row === undefined) {
      row = this.ctx.storage.sql.exec<Row>("SELECT * FROM bucket WHERE key = ?", key).toArray()[0] ?? null;
      this.remember(key, row);
    }
    return row;
  }

  private remember(key: string, row: Row | null): void {
    if (this.rows.size >= MAX_CACHED && !this.rows.has(key)) this.rows.clear();
    this.rows.set(key, row);
  }

  private writeRow(key: string, state: BucketState, limit: Limit, now: number, held: number): void {
    const full = fullAt(state, limit, now, held, MIN_ALARM_DELAY_MS);
    const row: Row = {
      key,
      tokens: state.tokens,
      updated_at: state.updatedAt,
      rate: limit.rate,
      per_ms: limit.perMs,
      burst: limit.burst,
      full_at: Number.isFinite(full) ? full : Number.MAX_SAFE_INTEGER,
    };
    this.ctx.storage.sql.exec(
      "INSERT OR REPLACE INTO bucket (key, tokens, updated_at, rate, per_ms, burst, full_at) VALUES (?, ?, ?, ?, ?, ?, ?)",
      key,
      row.tokens,
      row.updated_at,
      row.rate,
      row.per_ms,
      row.burst,
      row.full_at,
    );
    this.remember(key, row);
    // The alarm judges on the real clock, so a charge made on another one (`now` is a parameter, for
    // tests) schedules nothing: the real clock would find its bucket full at once.
    if (Math.abs(now - Date.now()) <= 1000) this.alarms.request(row.full_at);
  }

  /**
   * Buckets due to be full: each one that is (its leases ended) is deleted; the others are stored
   * with their expired leases ended and looked at again when they will be full.
   */
  override async alarm(): Promise<void> {
    this.alarms.fired();
    const now = Date.now();
    const sql = this.ctx.storage.sql;
    const due = sql
      .exec<Row>("SELECT * FROM bucket WHERE full_at <= ? ORDER BY full_at LIMIT ?", now, ALARM_BATCH)
      .toArray();
    for (const row of due) {
      const limit: Limit = { rate: row.rate, perMs: row.per_ms, burst: row.burst };
      const open = this.leasesOf(row.key);
      const { state, held, ended } = endLeases(
        { tokens: row.tokens, updatedAt: row.updated_at },
        limit,
        now,
        open,
        [],
        0,
      );
      for (const id of ended) sql.exec("DELETE FROM lease WHERE id = ?", id);
      const left = open.length - ended.length;
      if (left > 0) this.openLeases.set(row.key, left);
      else this.openLeases.delete(row.key);
      if (held === 0 && isFull(state, limit, now)) {
        sql.exec("DELETE FROM bucket WHERE key = ?", row.key);
        this.remember(row.key, null);
      } else {
        this.writeRow(row.key, state, limit, now, held);
      }
    }
    const next = sql.exec<{ at: number | null }>("SELECT MIN(full_at) AS at FROM bucket").one().at;
    if (next !== null) this.alarms.request(due.length === ALARM_BATCH ? now : Math.max(next, now));
  }

  /** A key's stored bucket, for tests and diagnostics. */
  peek(key: string): { tokens: number; updatedAt: number } | null {
    const row = this.ctx.storage.sql.exec<Row>("SELECT * FROM bucket WHERE key = ?", key).toArray()[0];
    return row ? { tokens: row.tokens, updatedAt: row.updated_at } : null;
  }
}
