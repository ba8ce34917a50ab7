/**
 * RateLimiter — one Durable Object per bucket key (`publish:<sub>`, `token-issue:<ip>`, …), so load
 * spreads across objects and one hot key cannot slow the others.
 *
 * `charge` is synchronous from reading the bucket to writing it back (SQLite calls are synchronous in
 * a Durable Object), so concurrent requests are decided strictly one after another. The state is
 * written on every charge, so eviction or a restart never refills a bucket early.
 */
import { DurableObject } from "cloudflare:workers";
import type { Limit } from "./limits";
import {
  type BatchDecision,
  type BucketDecision,
  type BucketState,
  fullBucket,
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
export type BatchChargeResult = Omit<BatchDecision, "state">;

export class RateLimiter extends DurableObject<Env> {
  constructor(ctx: DurableObjectState, env: Env) {
    super(ctx, env);
    ctx.storage.sql.exec(`CREATE TABLE IF NOT EXISTS bucket (
      id INTEGER PRIMARY KEY CHECK (id = 1), tokens REAL NOT NULL, updated_at INTEGER NOT NULL,
      rate INTEGER NOT NULL, per_ms REAL NOT NULL, burst INTEGER NOT NULL)`);
  }

  /** Takes one token from this bucket under `limit`. `now` defaults to this object's clock. */
  charge(limit: Limit, now: number = Date.now()): ChargeResult {
    const { granted, ...rest } = this.chargeMany(limit, 1, now);
    return { allowed: granted === 1, ...rest };
  }

  /**
   * Decides `count` requests that reached one Worker isolate together (see LimiterGate): the first
   * `granted` are admitted, the rest denied and charged nothing. One read and one write either way.
   */
  chargeMany(limit: Limit, count: number, now: number = Date.now()): BatchChargeResult {
    const sql = this.ctx.storage.sql;
    const row = sql.exec<Row>("SELECT * FROM bucket WHERE id = 1").toArray()[0];
    let state: BucketState;
    if (!row) {
      state = fullBucket(limit, now);
    } else {
      state = { tokens: row.tokens, updatedAt: row.updated_at };
      const stored: Limit = { rate: row.rate, perMs: row.per_ms, burst: row.burst };
      if (stored.rate !== limit.rate || stored.perMs !== limit.perMs || stored.burst !== limit.burst) {
        state = rescale(state, stored, limit, now);
      }
    }
    const n = Number.isInteger(count) && count > 0 ? Math.min(count, 10_000) : 1;
    const { state: next, ...decision } = takeMany(state, limit, now, n);
    sql.exec(
      "INSERT OR REPLACE INTO bucket (id, tokens, updated_at, rate, per_ms, burst) VALUES (1, ?, ?, ?, ?, ?)",
      next.tokens,
      next.updatedAt,
      limit.rate,
      limit.perMs,
      limit.burst,
    );
    return decision;
  }

  /** The stored bucket, for tests and diagnostics. */
  peek(): { tokens: number; updatedAt: number } | null {
    const row = this.ctx.storage.sql.exec<Row>("SELECT * FROM bucket WHERE id = 1").toArray()[0];
    return row ? { tokens: row.tokens, updatedAt: row.updated_at } : null;
  }
}
