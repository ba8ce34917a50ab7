/**
 * LimiterShard — one Durable Object holds the buckets of every key that hashes to it
 * (`shardOf(key)`, {@link LIMITER_SHARDS} objects in all), so one call decides a batch of charges
 * for many different keys: a crowd of subjects costs about what one subject costs
 * (docs/operations.md, "Rate-limit shards").
 *
 * Strict as one object per key was: `decide` is synchronous from reading the first bucket to writing
 * the last (SQLite calls are synchronous in a Durable Object), so concurrent batches are decided one
 * after another, each key's requests in arrival order, each key's tokens only its own; every
 * charge is written before the answer leaves, so eviction or a restart never refills a bucket early.
 * The object is each of its buckets' only writer, so after a key's first read it decides from a copy
 * in memory, written through on every charge.
 *
 * Moving in: the buckets of the previous release lived in one RateLimiter object per key. Before a
 * shard first decides a key it has no row for, it takes that key's state from its old object
 * (`RateLimiter.handOver`), which from then on forwards every charge here instead of deciding it
 * (an isolate still on the previous code can never get tokens twice). Concurrent batches for that
 * key wait for the same hand-over; no key is decided before its state is in. A shard asks for a
 * key's old state while {@link legacyWindowMs} has not passed since the shard was created.
 *
 * Storage is bounded by activity: a bucket whose row says it is full again (refilled, leases ended)
 * is deleted by the alarm, per key; a full bucket is exactly what a missing row means.
 */
import { DurableObject } from "cloudflare:workers";
import { limiterShardStub, rateLimiterStub } from "../platform/stubs";
import { type BatchChargeResult, chargeBucket, fullAt, type LeaseRequest, type StoredBucket } from "./bucket-charge";
import type { Limit } from "./limits";
import type { LegacyState } from "./rate-limiter";
import { type BucketState, endLeases, isFull, type OpenLease } from "./token-bucket";

/**
 * How many shard objects hold the buckets. A key's shard is fixed by this number, so changing it
 * moves keys between shards and needs a hand-over like the one from per-key objects: do not change it
 * without one. See docs/operations.md, "Rate-limit shards", for how it was chosen.
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

/**
 * How long after a shard is created it still asks keys' old per-key objects for their state: a day,
 * or the time `limit` takes to refill from empty if that is longer. By then every old object's
 * bucket is full again (the previous release's isolates are long gone), which is what no state means.
 */
export function legacyWindowMs(limit: Limit): number {
  const refill = limit.rate > 0 ? (limit.burst * limit.perMs) / limit.rate : 0;
  return Math.max(24 * 3_600_000, Math.ceil(refill) + 3_600_000);
}

/** One key's charge in a batch: `count` requests of `key` under `limit`, in arrival order. */
export interface KeyCharge {
  key: string;
  limit: Limit;
  count: number;
  lease?: LeaseRequest;
  /**
   * Only settles `lease.settle` (carried by a call made for other keys): charges nothing, grants no
   * lease, and does nothing for a key this shard holds no bucket for (its leases have ended).
   */
  settleOnly?: boolean;
}

/** A key's answer: its decision, or `error` when its state could not be read (the caller fails closed). */
export type KeyResult = BatchChargeResult | { error: string };

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
  /** Hand-overs from old per-key objects in flight, so concurrent batches wait for the same one. */
  private readonly pulls = new Map<string, Promise<void>>();
  /** When this shard was created (its first charge), for {@link legacyWindowMs}. */
  private born: number;
  /** When the alarm is set for (null: none), as this instance set or read it. */
  private alarmAt: number | null = null;

  constructor(ctx: DurableObjectState, env: Env) {
    super(ctx, env);
    const sql = ctx.storage.sql;
    sql.exec(`CREATE TABLE IF NOT EXISTS bucket (
      key TEXT PRIMARY KEY, tokens REAL NOT NULL, updated_at INTEGER NOT NULL,
      rate INTEGER NOT NULL, per_ms REAL NOT NULL, burst INTEGER NOT NULL, full_at REAL NOT NULL)`);
    sql.exec("CREATE INDEX IF NOT EXISTS bucket_full_at ON bucket (full_at)");
    sql.exec(`CREATE TABLE IF NOT EXISTS lease (
      id TEXT PRIMARY KEY, key TEXT NOT NULL, tokens INTEGER NOT NULL, expires_at INTEGER NOT NULL)`);
    sql.exec("CREATE INDEX IF NOT EXISTS lease_key ON lease (key)");
    sql.exec("CREATE TABLE IF NOT EXISTS meta (id INTEGER PRIMARY KEY CHECK (id = 1), born INTEGER NOT NULL)");
    const meta = sql.exec<{ born: number }>("SELECT born FROM meta WHERE id = 1").toArray()[0];
    this.born = meta?.born ?? Date.now();
    if (!meta) sql.exec("INSERT INTO meta (id, born) VALUES (1, ?)", this.born);
    for (const r of sql.exec<{ key: string; n: number }>("SELECT key, COUNT(*) AS n FROM lease GROUP BY key")) {
      this.openLeases.set(r.key, r.n);
    }
    ctx.blockConcurrencyWhile(async () => {
      this.alarmAt = await ctx.storage.getAlarm();
    });
  }

  /**
   * Decides a batch of charges for different keys (each key at most once, with its requests'
   * count), every key strictly against its own bucket. `now` defaults to this object's clock.
   * `legacy`: a key's old state, sent by its old object when it forwards a charge.
   */
  async decide(charges: KeyCharge[], now?: number, legacy?: { key: string; state: LegacyState }): Promise<KeyResult[]> {
    if (legacy) this.adopt(legacy.key, legacy.state);
    const failed = await this.moveIn(charges, now ?? Date.now(), legacy?.key);
    const at = now ?? Date.now();
    // From here to the end nothing awaits: the whole batch is decided as one step.
    const results = charges.map((c): KeyResult => {
      const error = failed.get(c.key);
      if (error) return { error };
      if (c.settleOnly) return this.settleKey(c, at);
      return this.chargeKey(c, at);
    });
    return results;
  }

  /**
   * Takes the old state of every key of the batch this shard has no row for, from its old per-key
   * object. Returns the keys whose old object did not answer (their charges fail closed).
   */
  private async moveIn(charges: KeyCharge[], now: number, forwardedBy?: string): Promise<Map<string, string>> {
    const waits: Promise<void>[] = [];
    const keys: string[] = [];
    for (const c of charges) {
      const pending = this.pulls.get(c.key);
      if (pending) {
        waits.push(pending);
        keys.push(c.key);
        continue;
      }
      // A key forwarded by its old object has handed over already (`legacy` above); a settle-only
      // entry needs no state (its leases were granted here, or have ended).
      if (
        c.settleOnly ||
        c.key === forwardedBy ||
        this.readRow(c.key) !== null ||
        now >= this.born + legacyWindowMs(c.limit)
      )
        continue;
      const pull = rateLimiterStub(this.env, c.key)
        .handOver(c.key, c.limit)
        .then((state) => this.adopt(c.key, state))
        .finally(() => this.pulls.delete(c.key));
      this.pulls.set(c.key, pull);
      waits.push(pull);
      keys.push(c.key);
    }
    const failed = new Map<string, string>();
    if (waits.length === 0) return failed;
    const settled = await Promise.allSettled(waits);
    settled.forEach((s, i) => {
      if (s.status === "rejected") {
        const reason = s.reason instanceof Error ? s.reason.message : String(s.reason);
        console.error("floodgate: a limiter key's old object did not hand over its state", reason);
        failed.set(keys[i] as string, reason);
      }
    });
    return failed;
  }

  /** Stores a key's state taken from its old object, unless this shard already holds the key. */
  private adopt(key: string, old: LegacyState): void {
    if (this.readRow(key) !== null) return;
    const now = Date.now();
    const sql = this.ctx.storage.sql;
    const open = old.leases.filter((l) => l.expiresAt > now);
    for (const l of open) {
      sql.exec(
        "INSERT OR IGNORE INTO lease (id, key, tokens, expires_at) VALUES (?, ?, ?, ?)",
        l.id,
        key,
        l.tokens,
        l.expiresAt,
      );
    }
    if (open.length > 0) this.openLeases.set(key, (this.openLeases.get(key) ?? 0) + open.length);
    if (old.bucket) {
      const held = open.reduce((a, l) => a + l.tokens, 0);
      this.writeRow(key, old.bucket.state, old.bucket.limit, now, held);
    }
  }

  private chargeKey(c: KeyCharge, now: number): BatchChargeResult {
    const row = this.readRow(c.key);
    const stored: StoredBucket | null = row
      ? {
          state: { tokens: row.tokens, updatedAt: row.updated_at },
          limit: { rate: row.rate, perMs: row.per_ms, burst: row.burst },
        }
      : null;
    const outcome = chargeBucket(stored, c.limit, now, c.count, this.leasesOf(c.key), c.lease);
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
  private settleKey(c: KeyCharge, now: number): KeyResult {
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
    if (Math.abs(now - Date.now()) <= 1000) this.scheduleAt(row.full_at);
  }

  /** Sets the alarm for `at` unless it is set for earlier already: one that fires early looks again. */
  private scheduleAt(at: number): void {
    if (at >= Number.MAX_SAFE_INTEGER || (this.alarmAt !== null && this.alarmAt <= at)) return;
    this.alarmAt = at;
    this.ctx.storage.setAlarm(at).catch((e: unknown) => {
      this.alarmAt = null;
      console.error("floodgate: could not set the limiter shard's alarm", e instanceof Error ? e.message : e);
    });
  }

  /**
   * Buckets due to be full: each one that is (its leases ended) is deleted; the others are stored
   * with their expired leases ended and looked at again when they will be full.
   */
  override async alarm(): Promise<void> {
    this.alarmAt = null;
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
    if (next !== null) this.scheduleAt(due.length === ALARM_BATCH ? now : Math.max(next, now));
  }

  /** A key's stored bucket, for tests and diagnostics. */
  peek(key: string): { tokens: number; updatedAt: number } | null {
    const row = this.ctx.storage.sql.exec<Row>("SELECT * FROM bucket WHERE key = ?", key).toArray()[0];
    return row ? { tokens: row.tokens, updatedAt: row.updated_at } : null;
  }
}
