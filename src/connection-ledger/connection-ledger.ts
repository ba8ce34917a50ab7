/**
 * ConnectionLedger — one Durable Object per client (its token's `sub`, else its IP, IPv6 per /64:
 * src/channel/client-cap.ts `clientKey`): how many open subscriptions and Pusher connections the
 * client holds over all channels, so it holds at most `MAX_CONNECTIONS_PER_CLIENT` (docs/api.md,
 * "Relays"; docs/security.md).
 *
 * A count that spans channels cannot live in any channel's object. Here it is what the client's
 * holders (relays, connection hosts) last said they hold, each statement standing for
 * {@link HOLD_TTL_MS} unless renewed (they renew every {@link HOLD_RENEW_MS} on their alarms), plus
 * the leases taken by subscribes on their way (lapsing after {@link LEASE_TTL_MS} unless their holder
 * reports them joined). So a close counts out as soon as its holder reports it, and a holder that
 * dies takes its count with it within 30 s: nothing needs to be released for the count to heal.
 *
 * Cost: a subscribe makes one call here (one row written); a holder one call per client whose count
 * changed, and one per client it holds every {@link HOLD_RENEW_MS}. One object per client spreads the
 * load as clients spread: only a client opening connections fast loads its own ledger. A ledger
 * with nothing standing keeps nothing in storage.
 */
import { DurableObject } from "cloudflare:workers";
import { AlarmScheduler } from "../platform/alarm-scheduler";
import { HOLD_TTL_MS, LEASE_TTL_MS, type LedgerAnswer } from "./calls";

export class ConnectionLedger extends DurableObject<Env> {
  private readonly sql: SqlStorage;
  /** Holder → its count and until when it stands; lease → until when it waits. Mirrors the tables. */
  private readonly holds = new Map<string, { n: number; until: number }>();
  private readonly leases = new Map<string, number>();
  private ready = false;
  /** Set for the earliest time something lapses, so what lapses is deleted even if nobody asks again. */
  private readonly alarms: AlarmScheduler;

  constructor(ctx: DurableObjectState, env: Env) {
    super(ctx, env);
    this.sql = ctx.storage.sql;
    this.alarms = new AlarmScheduler(ctx.storage, "the connection ledger's alarm");
    ctx.blockConcurrencyWhile(async () => {
      await this.alarms.load();
      const tables = this.sql
        .exec<{ name: string }>("SELECT name FROM sqlite_master WHERE type = 'table' AND name = 'holds'")
        .toArray();
      if (tables.length === 0) return;
      this.ready = true;
      for (const r of this.sql.exec<{ holder: string; n: number; until: number }>("SELECT * FROM holds")) {
        this.holds.set(r.holder, { n: r.n, until: r.until });
      }
      for (const r of this.sql.exec<{ id: string; until: number }>("SELECT * FROM leases"))
        this.leases.set(r.id, r.until);
    });
  }

  /** What the client holds now: its holders' standing counts and its leases on their way. */
  held(now = Date.now()): number {
    this.lapse(now);
    let n = this.leases.size;
    for (const h of this.holds.values()) n += h.n;
    return n;
  }

  /** A lease for one more connection, or `full` when the client holds `max` already. */
  acquire(max: number): LedgerAnswer {
    const now = Date.now();
    if (this.held(now) >= max) return { full: true };
    const lease = crypto.randomUUID();
    const until = now + LEASE_TTL_MS;
    this.leases.set(lease, until);
    this.tables().exec("INSERT INTO leases (id, until) VALUES (?, ?)", lease, until);
    this.wake(until);
    return { lease };
  }

  /** A lease whose subscribe was refused further on (or failed): it stops counting now. */
  release(lease: string): void {
    if (!this.leases.delete(lease)) return;
    this.tables().exec("DELETE FROM leases WHERE id = ?", lease);
    this.tidy();
  }

  /** See {@link LedgerForHolder.hold}. */
  hold(holder: string, n: number, joined: string[]): void {
    const now = Date.now();
    const sql = this.tables();
    for (const lease of joined) if (this.leases.delete(lease)) sql.exec("DELETE FROM leases WHERE id = ?", lease);
    if (n > 0) {
      const until = now + HOLD_TTL_MS;
      this.holds.set(holder, { n, until });
      sql.exec("INSERT OR REPLACE INTO holds (holder, n, until) VALUES (?, ?, ?)", holder, n, until);
      this.wake(until);
    } else if (this.holds.delete(holder)) {
      sql.exec("DELETE FROM holds WHERE holder = ?", holder);
    }
    this.tidy();
  }

  override async alarm(): Promise<void> {
    this.alarms.fired();
    this.lapse(Date.now());
    this.tidy();
    let next = Number.POSITIVE_INFINITY;
    for (const h of this.holds.values()) next = Math.min(next, h.until);
    for (const until of this.leases.values()) next = Math.min(next, until);
    this.alarms.request(next);
  }

  /** Statements not renewed and leases never joined stop counting. */
  private lapse(now: number): void {
    if (!this.ready) return;
    for (const [holder, h] of this.holds) {
      if (h.until > now) continue;
      this.holds.delete(holder);
      this.sql.exec("DELETE FROM holds WHERE holder = ?", holder);
    }
    for (const [id, until] of this.leases) {
      if (until > now) continue;
      this.leases.delete(id);
      this.sql.exec("DELETE FROM leases WHERE id = ?", id);
    }
  }

  /** Nothing standing: nothing kept (the alarm goes with it). */
  private tidy(): void {
    if (!this.ready || this.holds.size > 0 || this.leases.size > 0) return;
    this.ready = false;
    this.alarms.cleared();
    this.ctx.storage.deleteAll().catch((e: unknown) => {
      console.error("floodgate ledger: could not delete its storage", e instanceof Error ? e.message : e);
    });
  }

  private wake(at: number): void {
    this.alarms.request(at);
  }

  private tables(): SqlStorage {
    if (!this.ready) {
      this.sql.exec(
        "CREATE TABLE IF NOT EXISTS holds (holder TEXT PRIMARY KEY, n INTEGER NOT NULL, until INTEGER NOT NULL)",
      );
      this.sql.exec("CREATE TABLE IF NOT EXISTS leases (id TEXT PRIMARY KEY, until INTEGER NOT NULL)");
      this.ready = true;
    }
    return this.sql;
  }
}
