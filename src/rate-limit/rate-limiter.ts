/**
 * RateLimiter — the previous release's limiter: one Durable Object per bucket key (`publish:<sub>`,
 * `token-issue:<ip>`, …). Buckets now live in shards, many keys to an object (src/rate-limit/limiter-shard.ts);
 * this class stays because its objects may still hold state, and isolates of the previous release
 * may still call them during a deploy (docs/operations.md, "Rate-limit shards").
 *
 * Until its key's shard takes its state (`handOver`), an object decides its bucket as before: `charge`
 * is synchronous from reading the bucket to writing it back, so concurrent requests are decided
 * strictly one after another, and the state is written on every charge. Once handed over, it keeps
 * what it handed over (so a shard that lost it can take it again) and forwards every charge to the
 * shard instead of deciding it: an isolate on the previous code never gets tokens twice.
 *
 * Storage is bounded by activity: an alarm at the time the bucket is full again (its leases ended)
 * deletes everything, since a full bucket is exactly what a missing row means; a handed-over object
 * deletes everything once its shard no longer asks for it ({@link legacyWindowMs}).
 */
import { DurableObject } from "cloudflare:workers";
import { type BatchChargeResult, chargeBucket, fullAt, type LeaseRequest, type StoredBucket } from "./bucket-charge";
import { legacyWindowMs, shardStub } from "./limiter-shard";
import type { Limit } from "./limits";
import { type BucketDecision, type BucketState, endLeases, isFull, type OpenLease } from "./token-bucket";

interface Row {
  [key: string]: SqlStorageValue;
  tokens: number;
  updated_at: number;
  rate: number;
  per_ms: number;
  burst: number;
}

export type ChargeResult = Omit<BucketDecision, "state">;

/** A key's bucket and open leases as its old object hands them to the key's shard. */
export interface LegacyState {
  bucket: StoredBucket | null;
  leases: OpenLease[];
}

/** What a handed-over object keeps: its key, what it handed over, and until when. */
interface HandedOver {
  key: string;
  state: LegacyState;
  until: number;
}

/** The soonest a bucket's storage is reclaimed after a charge: see {@link RateLimiter.alarm}. */
const MIN_ALARM_DELAY_MS = 60_000;
/** How long an object that had no bucket to hand over keeps forwarding: see {@link RateLimiter.handOver}. */
export const EMPTY_HAND_OVER_MS = 3_600_000;

export class RateLimiter extends DurableObject<Env> {
  /** The stored bucket row as last written by this instance; undefined until first read. */
  private row: Row | null | undefined = undefined;
  /** Open lease rows; 0 lets a charge skip the lease table. */
  private openLeases: number;
  /** When the alarm is set for (null: none), as this instance set or read it. */
  private alarmAt: number | null = null;
  /** The alarm deleted everything; the tables come back with the next charge. */
  private wiped = false;
  /** Set once this object handed its bucket to its shard. */
  private handedOver: HandedOver | null;

  constructor(ctx: DurableObjectState, env: Env) {
    super(ctx, env);
    this.createTables();
    this.openLeases = ctx.storage.sql.exec<{ n: number }>("SELECT COUNT(*) AS n FROM lease").one().n;
    this.handedOver = this.readHandedOver();
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
    sql.exec(`CREATE TABLE IF NOT EXISTS handed_over (
      id INTEGER PRIMARY KEY CHECK (id = 1), key TEXT NOT NULL, state TEXT NOT NULL, until INTEGER NOT NULL)`);
  }

  private readHandedOver(): HandedOver | null {
    const r = this.ctx.storage.sql
      .exec<{ key: string; state: string; until: number }>("SELECT key, state, until FROM handed_over")
      .toArray()[0];
    return r ? { key: r.key, state: JSON.parse(r.state) as LegacyState, until: r.until } : null;
  }

  /**
   * The bucket is due to be full: if it is (and no lease is open), delete everything; otherwise look
   * again when it will be. Expired leases end here too, their tokens spent, and the state that
   * results is stored so nothing refills past them later. A handed-over object deletes everything
   * once its shard no longer asks for what it handed over.
   */
  override async alarm(): Promise<void> {
    this.alarmAt = null;
    if (this.wiped) return;
    const now = Date.now();
    if (this.handedOver) {
      if (now < this.handedOver.until) {
        this.setAlarm(this.handedOver.until);
        return;
      }
    } else {
      const row = this.readRow();
      if (row) {
        const limit: Limit = { rate: row.rate, perMs: row.per_ms, burst: row.burst };
        const { state, held, ended } = endLeases(
          { tokens: row.tokens, updatedAt: row.updated_at },
          limit,
          now,
          this.openLeaseRows(),
          [],
          0,
        );
        this.deleteLeases(ended);
        if (held > 0 || !isFull(state, limit, now)) {
          this.writeRow(state, limit);
          this.scheduleFull(state, limit, now, held);
          return;
        }
      }
    }
    // Issued and marked in one synchronous step: a charge that runs while they settle recreates
    // the tables instead of writing to ones that are gone.
    const deleted = Promise.all([this.ctx.storage.deleteAlarm(), this.ctx.storage.deleteAll()]);
    this.wiped = true;
    this.row = null;
    this.openLeases = 0;
    this.handedOver = null;
    await deleted;
  }

  /** Takes one token from this bucket under `limit`. `now` defaults to this object's clock. */
  async charge(limit: Limit, now?: number): Promise<ChargeResult> {
    const { granted, ...rest } = await this.chargeMany(limit, 1, now);
    return { allowed: granted === 1, ...rest };
  }

  /**
   * Decides `count` requests that reached one Worker isolate together: the first `granted` are
   * admitted, the rest denied and charged nothing (src/rate-limit/bucket-charge.ts, leases included). Once this
   * object has handed over, the key's shard decides instead.
   */
  async chargeMany(limit: Limit, count: number, now?: number, lease?: LeaseRequest): Promise<BatchChargeResult> {
    const handed = this.handedOver;
    if (handed) {
      const [r] = await shardStub(this.env, handed.key).decide([{ key: handed.key, limit, count, lease }], now, {
        key: handed.key,
        state: handed.state,
      });
      if (!r || "error" in r) throw new Error("the limiter shard could not decide");
      return r;
    }
    return this.decideHere(limit, count, now ?? Date.now(), lease);
  }

  private decideHere(limit: Limit, count: number, now: number, lease?: LeaseRequest): BatchChargeResult {
    this.revive();
    const row = this.readRow();
    const stored: StoredBucket | null = row
      ? {
          state: { tokens: row.tokens, updatedAt: row.updated_at },
          limit: { rate: row.rate, perMs: row.per_ms, burst: row.burst },
        }
      : null;
    const outcome = chargeBucket(stored, limit, now, count, this.openLeaseRows(), lease);
    this.deleteLeases(outcome.ended);
    if (outcome.granted) {
      const g = outcome.granted;
      this.ctx.storage.sql.exec(
        "INSERT INTO lease (id, tokens, expires_at) VALUES (?, ?, ?)",
        g.id,
        g.tokens,
        g.expiresAt,
      );
      this.openLeases++;
    }
    this.writeRow(outcome.next, limit);
    this.scheduleFull(outcome.next, limit, now, outcome.held);
    return outcome.result;
  }

  /**
   * Hands this bucket to `key`'s shard (src/rate-limit/limiter-shard.ts): returns the bucket and its open leases
   * and from now on forwards every charge to the shard. Asked again, returns the same state, so a
   * shard that lost it (a restart between taking and storing it) takes it again.
   */
  handOver(key: string, limit: Limit): LegacyState {
    if (this.handedOver) return this.handedOver.state;
    this.revive();
    const row = this.readRow();
    const state: LegacyState = {
      bucket: row
        ? {
            state: { tokens: row.tokens, updatedAt: row.updated_at },
            limit: { rate: row.rate, perMs: row.per_ms, burst: row.burst },
          }
        : null,
      leases: this.openLeaseRows(),
    };
    // An object that held nothing only has to stop isolates on the previous code deciding afresh,
    // and those are gone minutes after the deploy: it keeps its mark an hour, not a whole window.
    const kept = state.bucket || state.leases.length > 0 ? legacyWindowMs(limit) : EMPTY_HAND_OVER_MS;
    const until = Date.now() + kept;
    const sql = this.ctx.storage.sql;
    sql.exec("DELETE FROM bucket");
    sql.exec("DELETE FROM lease");
    sql.exec("INSERT INTO handed_over (id, key, state, until) VALUES (1, ?, ?, ?)", key, JSON.stringify(state), until);
    this.row = null;
    this.openLeases = 0;
    this.handedOver = { key, state, until };
    this.setAlarm(until);
    return state;
  }

  /** After the alarm wiped everything, the tables come back with the next write. */
  private revive(): void {
    if (!this.wiped) return;
    this.wiped = false;
    this.createTables();
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

  private openLeaseRows(): OpenLease[] {
    if (this.openLeases === 0) return [];
    const open = this.ctx.storage.sql
      .exec<{ id: string; tokens: number; expires_at: number }>("SELECT * FROM lease")
      .toArray()
      .map((l) => ({ id: l.id, tokens: l.tokens, expiresAt: l.expires_at }));
    this.openLeases = open.length;
    return open;
  }

  private deleteLeases(ids: string[]): void {
    for (const id of ids) this.ctx.storage.sql.exec("DELETE FROM lease WHERE id = ?", id);
    this.openLeases -= ids.length;
  }

  /**
   * Sets the alarm for when the bucket will be full again, counting open leases as ending at their
   * latest. Never moves an earlier alarm later: one that fires early just looks again.
   */
  private scheduleFull(state: BucketState, limit: Limit, now: number, held: number): void {
    // The alarm judges on the real clock, so a charge made on another one (`now` is a parameter, for
    // tests) schedules nothing: the real clock would find its bucket full at once.
    if (Math.abs(now - Date.now()) > 1000) return;
    const at = fullAt(state, limit, now, held, MIN_ALARM_DELAY_MS);
    if (Number.isFinite(at)) this.setAlarm(at);
  }

  private setAlarm(at: number): void {
    if (this.alarmAt !== null && this.alarmAt <= at) return;
    this.alarmAt = at;
    this.ctx.storage.setAlarm(at).catch((e: unknown) => {
      this.alarmAt = null;
      console.error("floodgate: could not set the limiter's alarm", e instanceof Error ? e.message : e);
    });
  }

  /** The stored bucket, for tests and diagnostics. */
  peek(): { tokens: number; updatedAt: number } | null {
    if (this.wiped) return null;
    const row = this.ctx.storage.sql.exec<Row>("SELECT * FROM bucket WHERE id = 1").toArray()[0];
    return row ? { tokens: row.tokens, updatedAt: row.updated_at } : null;
  }
}
