/**
 * One client's connections are bounded across channels (docs/api.md, "Relays"; docs/security.md):
 * before a subscribe (or a Pusher connection) takes anything else, the client's ledger
 * (src/connection-ledger/) gives it a lease, or answers that the client holds
 * `MAX_CONNECTIONS_PER_CLIENT` open subscriptions and Pusher connections already: 429, bucket
 * `connections`. The holder that takes the connection confirms the lease; one refused further on is
 * released at once, and one never confirmed lapses in 30 s. One call per subscribe; the ledger asks
 * the client's stale holders again only before it refuses.
 */
import { CONNECTIONS_RETRY_AFTER_S, type LedgerAnswer } from "../../connection-ledger/calls";
import { connectionLedgerStub } from "../../platform/stubs";
import { ApiError } from "../../wire/errors";
import { orUnavailable } from "../http/errors";

/** The 429 of one connection more than `MAX_CONNECTIONS_PER_CLIENT`, shaped like a budget's. */
export function connectionsError(max: number): ApiError {
  return new ApiError(
    "rate_limited",
    "too many open subscriptions and Pusher connections for one client (MAX_CONNECTIONS_PER_CLIENT)",
    { bucket: "connections", retry_after_ms: String(CONNECTIONS_RETRY_AFTER_S * 1000) },
    {
      "Retry-After": String(CONNECTIONS_RETRY_AFTER_S),
      "RateLimit-Policy": `"connections";q=${max}`,
      RateLimit: `"connections";r=0;t=${CONNECTIONS_RETRY_AFTER_S}`,
    },
  );
}

/** A lease on one more connection of `client`, or null when it holds `max`. @throws ApiError 503 when its ledger fails */
export async function leaseConnection(env: Env, client: string, max: number): Promise<string | null> {
  const answer = await orUnavailable(
    "the client's connection count",
    async (): Promise<LedgerAnswer> => await connectionLedgerStub(env, client).acquire(max, client),
  );
  return "full" in answer ? null : answer.lease;
}

/** A lease on one more connection of `client`. @throws ApiError 429 `connections`; 503 when its ledger fails */
export async function takeConnection(env: Env, client: string, max: number): Promise<string> {
  const lease = await leaseConnection(env, client, max);
  if (lease === null) throw connectionsError(max);
  return lease;
}

/** A lease whose connection was refused or failed further on: the slot is free now, not in 30 s. */
export async function releaseConnection(env: Env, client: string, lease: string): Promise<void> {
  try {
    await connectionLedgerStub(env, client).release(lease);
  } catch (e) {
    // It lapses on its own.
    console.error("floodgate: could not release a connection lease", e instanceof Error ? e.message : e);
  }
}
