/**
 * What a client's connection ledger (./connection-ledger.ts) exchanges with the Worker and with the
 * holders of connections (relays, connection hosts), and the times it keeps
 * (docs/api.md, "Relays"; `MAX_CONNECTIONS_PER_CLIENT`).
 */

/** How long a slot taken by a subscribe waits for its holder to report it (as a channel's reservation). */
export const LEASE_TTL_MS = 30_000;

/**
 * How old a holder's statement may be before a refusal asks the holder again: a holder that died
 * (its connections with it) stops counting by the time it would refuse, within 30 s as a closed
 * subscription does (docs/api.md). Also how often one holder is asked, at most, for one client.
 */
export const ASK_AFTER_MS = 30_000;

/** How often, at most, a ledger with statements wakes to ask its stale holders and forget the gone. */
export const SWEEP_MS = 3_600_000;

/** `Retry-After` of a subscribe or Pusher connection refused at `MAX_CONNECTIONS_PER_CLIENT`. */
export const CONNECTIONS_RETRY_AFTER_S = 5;

/** A slot for one more connection of the client, or refused: it holds `max` already. */
export type LedgerAnswer = { lease: string } | { full: true };

/** The ledger as a holder calls it (the object implements it; the stub makes it async). */
export interface LedgerForHolder {
  /**
   * `holder` holds `n` open connections of `client` (0: none any more); `joined`: the leases of those
   * that joined since it last said, which stop counting on their own.
   */
  hold(client: string, holder: string, n: number, joined: string[]): void | Promise<void>;
}

/** A holder as the ledger asks it again (relays and connection hosts implement it). */
export interface HolderForLedger {
  /** How many open connections of `client` it holds now, from its sockets; changes nothing. */
  heldOf(client: string): number | Promise<number>;
}
