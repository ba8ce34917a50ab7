/**
 * What a client's connection ledger (./connection-ledger.ts) exchanges with the Worker and with the
 * holders of connections (relays, connection hosts), and the times its leases keep
 * (docs/api.md, "Relays"; `MAX_CONNECTIONS_PER_CLIENT`).
 */

/** How long a slot taken by a subscribe waits for its holder to report it (as a channel's reservation). */
export const LEASE_TTL_MS = 30_000;

/**
 * How long a holder's count stands without being told again: a holder that died (its connections
 * with it) stops counting within this, as a closed subscription does (docs/api.md: within 30 s).
 */
export const HOLD_TTL_MS = 30_000;

/** How often a holder tells each ledger of its clients what it holds, well inside {@link HOLD_TTL_MS}. */
export const HOLD_RENEW_MS = 10_000;

/** `Retry-After` of a subscribe or Pusher connection refused at `MAX_CONNECTIONS_PER_CLIENT`. */
export const CONNECTIONS_RETRY_AFTER_S = 5;

/** A slot for one more connection of the client, or refused: it holds `max` already. */
export type LedgerAnswer = { lease: string } | { full: true };

/** The ledger as a holder calls it (the object implements it; the stub makes it async). */
export interface LedgerForHolder {
  /**
   * `holder` holds `n` open connections of this ledger's client (0: none any more); `joined`: the
   * leases of those that joined since it last said, which stop counting on their own.
   */
  hold(holder: string, n: number, joined: string[]): void | Promise<void>;
}
