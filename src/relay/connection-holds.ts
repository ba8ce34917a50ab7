/**
 * What a holder of connections (a relay, a connection host) tells each of its clients' ledgers
 * (src/connection-ledger/connection-ledger.ts): how many it holds of that client, whenever that count
 * changes (joins, leaves, closes, a restart that finds fewer sockets), with the leases of those that
 * joined since, so the client's count over all channels follows the holder's real sockets
 * (`MAX_CONNECTIONS_PER_CLIENT`). And what it holds of one client when a ledger asks again.
 *
 * One call per client whose count changed, coalesced per turn; a failed call is repeated on the
 * alarm. Nothing is told while nothing changes, so the holder's alarm never wakes for its ledgers and
 * a quiet holder hibernates. Nothing here is stored: a holder that restarted or died without telling
 * is asked again by the ledger before it refuses anyone, and answers from its sockets.
 */
import type { LedgerForHolder } from "../connection-ledger/calls";
import type { AlarmScheduler } from "../platform/alarm-scheduler";
import { connectionLedgerStub } from "../platform/stubs";

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
      this.flush(now);
    });
  }

  /** The holder's alarm: calls that failed are repeated (nothing else is told on a schedule). */
  tick(): void {
    if (this.dirty.size > 0) this.flush(new Map(this.owner.counts()));
  }

  /** What the holder holds of `client` now, for its ledger asking again (changes nothing). */
  of(client: string): number {
    for (const [c, n] of this.owner.counts()) if (c === client) return n;
    return 0;
  }

  /**
   * Back from hibernation: its sockets are what it told before it slept, so waking tells no ledger
   * (else the first change after each wake would tell every client again). A count that fell while
   * it was gone (streams that did not survive a restart) is corrected when a ledger asks again.
   */
  restored(): void {
    for (const [client, n] of this.owner.counts()) this.told.set(client, n);
  }

  /** Forgets everything (the holder left; its ledgers were told 0, or ask it again). */
  reset(): void {
    this.told.clear();
    this.joinedLeases.clear();
    this.dirty.clear();
  }

  private flush(counts: Map<string, number>): void {
    const holder = this.owner.holder();
    if (holder === null) return;
    for (const client of this.dirty) {
      const n = counts.get(client) ?? 0;
      const leases = this.joinedLeases.get(client) ?? [];
      this.joinedLeases.delete(client);
      if (n > 0) this.told.set(client, n);
      else this.told.delete(client);
      Promise.resolve(this.owner.ledger(client).hold(client, holder, n, leases)).catch((e: unknown) => {
        console.error("floodgate: could not tell a connection ledger", e instanceof Error ? e.message : e);
        // Told again on the alarm, with its leases (which lapse on their own meanwhile).
        this.told.delete(client);
        if (leases.length > 0) this.joinedLeases.set(client, [...leases, ...(this.joinedLeases.get(client) ?? [])]);
        this.dirty.add(client);
        this.alarms.request(Date.now() + RETRY_MS);
      });
    }
    this.dirty.clear();
  }
}

/** The holds of a holder named `holder()` whose sockets are `held`, told to the clients' ledger objects. */
export function connectionHolds(
  env: Env,
  alarms: AlarmScheduler,
  holder: () => string | null,
  held: { clientCounts(): [string, number][] },
): ConnectionHolds {
  const ledger = (client: string) => connectionLedgerStub(env, client);
  return new ConnectionHolds({ holder, counts: () => held.clientCounts(), ledger }, alarms);
}
