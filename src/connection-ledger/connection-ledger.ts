/**
 * ConnectionLedger — one Durable Object per client (its token's `sub`, else its IP, IPv6 per /64:
 * src/channel/client-cap.ts `clientKey`): how many open subscriptions and Pusher connections the
 * client holds over all channels, so it holds at most `MAX_CONNECTIONS_PER_CLIENT` (docs/api.md,
 * "Relays"; docs/security.md).
 *
 * A count that spans channels cannot live in any channel's object. Here it is what the client's
 * holders (relays, connection hosts) last said they hold — each tells only when its count of the
 * client changes — plus the leases taken by subscribes on their way (lapsing after
 * {@link LEASE_TTL_MS} unless their holder reports them joined). A statement does not lapse by time:
 * a holder that died cannot say so, so before refusing, the ledger asks each holder whose statement
 * is older than {@link ASK_AFTER_MS} what it holds now (an object that died is asked as a fresh one,
 * which holds nothing) and decides on the answers. So a close counts out as soon as its holder
 * reports it, and a dead holder's connections stop counting by the time they would refuse anyone.
 *
 * Cost: a subscribe makes one call here (one row written); a holder one call per client whose count
 * changed; a refusal asks the client's stale holders again (at most `max` of them, each at most once
 * per {@link ASK_AFTER_MS}); a ledger with statements wakes at most once per {@link SWEEP_MS} to ask
 * its stale holders and forget those that hold nothing. Nothing runs while nothing changes, so quiet
 * relays and hosts hibernate. A ledger with nothing standing keeps nothing in storage.
 */
import { DurableObject } from "cloudflare:workers";
import { AlarmScheduler } from "../platform/alarm-scheduler";
import { connectionHostStub, relayStub } from "../platform/stubs";
import { ASK_AFTER_MS, type HolderForLedger, LEASE_TTL_MS, type LedgerAnswer, SWEEP_MS } from "./calls";

interface Statement {
  n: number;
  /** When the holder said it (or was last asked). */
  at: number;
}

export class ConnectionLedger extends DurableObject<Env> {
  private readonly sql: SqlStorage;
  /** Holder → its last statement; lease → until when it waits. Mirror the tables. */
  private readonly holds = new Map<string, Statement>();
  private readonly leases = new Map<string, number>();
  /** This ledger's client key, as its callers name it (the key its holders are asked about). */
  private client: string | null = null;
  /** Holders being asked now: a second refusal meanwhile waits for the same answer. */
  private readonly asking = new Map<string, Promise<void>>();
  /** When the next sweep of stale holders is due (memory only: after a restart the first alarm sweeps). */
  private sweepAt = 0;
  private ready = false;
  /** Set for the earliest lease to lapse, or the sweep, so what is gone is deleted even if nobody asks. */
  private readonly alarms: AlarmScheduler;
  /** The ledger's clock (a test gives its own to age statements). */
  clock: () => number = () => Date.now();

  constructor(ctx: DurableObjectState, env: Env) {
    super(ctx, env);
    this.sql = ctx.storage.sql;
    this.alarms = new AlarmScheduler(ctx.storage, "the connection ledger's alarm");
    ctx.blockConcurrencyWhile(async () => {
      await this.alarms.load();
      const tables = this.sql
        .exec<{ name: string }>("SELECT name FROM sqlite_master WHERE type = 'table' AND name = 'statements'")
        .toArray();
      if (tables.length === 0) return;
      this.ready = true;
      for (const r of this.sql.exec<{ holder: string; client: string; n: number; at: number }>(
        "SELECT * FROM statements",
      )) {
        this.holds.set(r.holder, { n: r.n, at: r.at });
        this.client = r.client;
      }
      for (const r of this.sql.exec<{ id: string; until: number }>("SELECT * FROM leases"))
        this.leases.set(r.id, r.until);
    });
  }

  /** What the client holds now: its holders' last statements and its leases on their way. */
  held(now = this.clock()): number {
    this.lapse(now);
    let n = this.leases.size;
    for (const h of this.holds.values()) n += h.n;
    return n;
  }

  /** A lease for one more connection of `client`, or `full` when it holds `max` already (stale holders asked again first). */
  async acquire(max: number, client: string): Promise<LedgerAnswer> {
    this.client = client;
    if (this.held() >= max) {
      await this.askStale(max);
      if (this.held() >= max) return { full: true };
    }
    const now = this.clock();
    const lease = crypto.randomUUID();
    const until = now + LEASE_TTL_MS;
    this.leases.set(lease, until);
    this.tables().exec("INSERT INTO leases (id, until) VALUES (?, ?)", lease, until);
    this.alarms.request(until);
    return { lease };
  }

  /** A lease whose subscribe was refused further on (or failed): it stops counting now. */
  release(lease: string): void {
    if (!this.leases.delete(lease)) return;
    this.tables().exec("DELETE FROM leases WHERE id = ?", lease);
    this.tidy();
  }

  /** See {@link LedgerForHolder.hold}. */
  hold(client: string, holder: string, n: number, joined: string[]): void {
    this.client = client;
    const sql = this.tables();
    for (const lease of joined) if (this.leases.delete(lease)) sql.exec("DELETE FROM leases WHERE id = ?", lease);
    this.state(holder, n, this.clock());
    this.tidy();
  }

  override async alarm(): Promise<void> {
    this.alarms.fired();
    if (this.holds.size > 0 && this.clock() >= this.sweepAt) {
      this.sweepAt = 0;
      await this.askStale(Number.POSITIVE_INFINITY);
    }
    this.lapse(this.clock());
    this.tidy();
    let next = this.holds.size > 0 ? this.sweep() : Number.POSITIVE_INFINITY;
    for (const until of this.leases.values()) next = Math.min(next, until);
    this.alarms.request(next);
  }

  /** Asks again the holders whose statement is older than {@link ASK_AFTER_MS}: at most `limit`, oldest first, at once. */
  private async askStale(limit: number): Promise<void> {
    const now = this.clock();
    const stale = [...this.holds]
      .filter(([holder, s]) => now - s.at >= ASK_AFTER_MS || this.asking.has(holder))
      .sort((a, b) => a[1].at - b[1].at)
      .slice(0, limit);
    await Promise.all(stale.map(([holder]) => this.ask(holder)));
  }

  private ask(holder: string): Promise<void> {
    const pending = this.asking.get(holder);
    if (pending) return pending;
    const client = this.client;
    const before = this.holds.get(holder);
    const asked = (async () => {
      try {
        if (client === null) return;
        const n = await holderStub(this.env, holder).heldOf(client);
        // The holder told meanwhile: its own statement is at least as new as this answer.
        if (this.holds.get(holder) !== before) return;
        this.state(holder, n, this.clock());
      } catch (e) {
        // Unreachable now: its statement stands, and it is not asked again before ASK_AFTER_MS.
        console.error("floodgate ledger: could not ask a holder", e instanceof Error ? e.message : e);
        const s = this.holds.get(holder);
        if (s === before && s) s.at = this.clock();
      } finally {
        this.asking.delete(holder);
      }
    })();
    this.asking.set(holder, asked);
    return asked;
  }

  /** `holder` holds `n` of the client, said at `at` (0: its statement goes). */
  private state(holder: string, n: number, at: number): void {
    if (n > 0) {
      this.holds.set(holder, { n, at });
      this.tables().exec(
        "INSERT OR REPLACE INTO statements (holder, client, n, at) VALUES (?, ?, ?, ?)",
        holder,
        this.client ?? "",
        n,
        at,
      );
      this.alarms.request(this.sweep());
    } else if (this.holds.delete(holder)) {
      this.tables().exec("DELETE FROM statements WHERE holder = ?", holder);
    }
  }

  /** When the next sweep is due: {@link SWEEP_MS} after the first statement since the last one. */
  private sweep(): number {
    if (this.sweepAt === 0) this.sweepAt = this.clock() + SWEEP_MS;
    return this.sweepAt;
  }

  /** Leases never joined stop counting (statements stand until their holder says or is asked). */
  private lapse(now: number): void {
    if (!this.ready) return;
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
    this.sweepAt = 0;
    this.alarms.cleared();
    this.ctx.storage.deleteAll().catch((e: unknown) => {
      console.error("floodgate ledger: could not delete its storage", e instanceof Error ? e.message : e);
    });
  }

  private tables(): SqlStorage {
    if (!this.ready) {
      this.sql.exec(
        "CREATE TABLE IF NOT EXISTS statements (holder TEXT PRIMARY KEY, client TEXT NOT NULL, n INTEGER NOT NULL, at INTEGER NOT NULL)",
      );
      this.sql.exec("CREATE TABLE IF NOT EXISTS leases (id TEXT PRIMARY KEY, until INTEGER NOT NULL)");
      this.ready = true;
    }
    return this.sql;
  }
}

/** A holder by its object name: connection hosts are `host:…` (src/host-directory/naming.ts), relays `relay:…`. */
function holderStub(env: Env, holder: string): HolderForLedger {
  return holder.startsWith("host:") ? connectionHostStub(env, holder) : relayStub(env, holder);
}
