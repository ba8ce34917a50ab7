/**
 * What a holder of connections (a relay, a connection host) tells each of its clients' ledgers
 * (src/connection-ledger/connection-ledger.ts): how many it holds of that client, after every change
 * and again every {@link HOLD_RENEW_MS} on its alarm, with the leases of those that joined since, so
 * the client's count over all channels follows the holder's real sockets (`MAX_CONNECTIONS_PER_CLIENT`).
 *
 * One call per client whose count changed, coalesced per turn; a failed call is repeated on the
 * alarm. Nothing here is stored: a restarted holder tells every client again on its next alarm, and
 * what it never tells lapses in the ledger on its own.
 */
import { HOLD_RENEW_MS, type LedgerForHolder } from "../connection-ledger/calls";
import type { AlarmScheduler } from "../platform/alarm-scheduler";

export interface HoldsOwner {
  /** The holder's name in every ledger (its object name), or null while it holds nothing. */
  holder(): string | null;
  /** Open connections per client key, now. */
  counts(): [string, number][];
  ledger(client: string): LedgerForHolder;
}

/** How soon a call that failed is repeated. */
const RETRY_MS = 2_000;

export class ConnectionHolds {
  /** Per client: what its ledger was last told, and leases joined since. */
  private readonly told = new Map<string, number>();
  private readonly joinedLeases = new Map<string, string[]>();
  private readonly dirty = new Set<string>();
  private scheduled = false;
  private renewedAt = 0;

  constructor(
    private readonly owner: HoldsOwner,
    private readonly alarms: AlarmScheduler,
  ) {}

  /** A connection of `client` joined with `lease` (empty: it took none). */
  joined(client: string, lease: string): void {
    if (lease !== "") this.joinedLeases.set(client, [...(this.joinedLeases.get(client) ?? []), lease]);
    this.changed();
  }

  /** The holder's connections changed: clients whose count moved are told, at the end of this turn. */
  changed(): void {
    if (this.scheduled) return;
    this.scheduled = true;
    queueMicrotask(() => {
      this.scheduled = false;
      const now = new Map(this.owner.counts());
      for (const [client, n] of now) if (this.told.get(client) !== n) this.dirty.add(client);
      for (const client of this.told.keys()) if (!now.has(client)) this.dirty.add(client);
      for (const client of this.joinedLeases.keys()) this.dirty.add(client);
      this.flush(now, Date.now());
    });
  }

  /** The holder's alarm: every client it holds is told again once per {@link HOLD_RENEW_MS}; then the next time. */
  tick(now: number): void {
    const counts = new Map(this.owner.counts());
    if (now - this.renewedAt >= HOLD_RENEW_MS) {
      for (const client of counts.keys()) this.dirty.add(client);
      this.renewedAt = now;
    }
    this.flush(counts, now);
    if (counts.size > 0) this.alarms.request(this.renewedAt + HOLD_RENEW_MS);
  }

  /** Forgets everything (the holder left; its ledgers' statements lapse or were told 0). */
  reset(): void {
    this.told.clear();
    this.joinedLeases.clear();
    this.dirty.clear();
  }

  private flush(counts: Map<string, number>, now: number): void {
    const holder = this.owner.holder();
    if (holder === null) return;
    if (this.renewedAt === 0) this.renewedAt = now;
    for (const client of this.dirty) {
      const n = counts.get(client) ?? 0;
      const leases = this.joinedLeases.get(client) ?? [];
      this.joinedLeases.delete(client);
      if (n > 0) this.told.set(client, n);
      else this.told.delete(client);
      Promise.resolve(this.owner.ledger(client).hold(holder, n, leases)).catch((e: unknown) => {
        console.error("floodgate: could not tell a connection ledger", e instanceof Error ? e.message : e);
        // Told again on the alarm, with its leases (which lapse on their own meanwhile).
        this.told.delete(client);
        if (leases.length > 0) this.joinedLeases.set(client, [...leases, ...(this.joinedLeases.get(client) ?? [])]);
        this.dirty.add(client);
        this.alarms.request(Date.now() + RETRY_MS);
      });
    }
    this.dirty.clear();
    if (counts.size > 0) this.alarms.request(this.renewedAt + HOLD_RENEW_MS);
  }
}
