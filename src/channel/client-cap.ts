import { ApiError } from "../wire/errors";
/**
 * One client cannot take a channel (docs/api.md, "Relays"; docs/security.md): at most
 * `MAX_SUBSCRIPTIONS_PER_CLIENT` open subscriptions per channel per client, counted by the channel's
 * relay registry (src/channel/relay-registry.ts) from its reservations and its relays' reports.
 *
 * The client is the verified token's `sub`, or without one the client IP (an IPv6 address as its
 * /64, src/worker/http/params.ts `clientIp`): one subscriber usually holds a whole /64. The two kinds are
 * prefixed apart, so a subject named like an address never shares an address's count.
 */

/**
 * `Retry-After` of a subscribe refused at the client's cap. The client frees a slot by closing one
 * of its own subscriptions; one that went away without closing stops counting within 30 s.
 */
export const CLIENT_CAP_RETRY_AFTER_S = 5;

/** The key a subscription is counted under: `sub:<sub>`, else `ip:<ip or /64>` (`ip:unknown` without one). */
export function clientKey(sub: string | null, ip: string | null): string {
  return sub !== null ? `sub:${sub}` : `ip:${ip ?? "unknown"}`;
}

/** The 429 of a subscribe past the client's cap, shaped like a budget's (bucket `subscriptions`). */
export function clientCapError(maxPerClient: number): ApiError {
  return new ApiError(
    "rate_limited",
    "too many open subscriptions to this channel for one client (MAX_SUBSCRIPTIONS_PER_CLIENT)",
    { bucket: "subscriptions", retry_after_ms: String(CLIENT_CAP_RETRY_AFTER_S * 1000) },
    {
      "Retry-After": String(CLIENT_CAP_RETRY_AFTER_S),
      "RateLimit-Policy": `"subscriptions";q=${maxPerClient}`,
      RateLimit: `"subscriptions";r=0;t=${CLIENT_CAP_RETRY_AFTER_S}`,
    },
  );
}

/**
 * The `clients` column of the channel's `relays` table: each relay's per-client counts, stored with
 * its other counts so a channel that restarts (eviction is routine for a quiet channel) still knows
 * what every client holds. Added to a table made before the column existed.
 */
export function addRelayClientsColumn(sql: SqlStorage): void {
  const columns = sql
    .exec<{ name: string }>("PRAGMA table_info(relays)")
    .toArray()
    .map((r) => r.name);
  if (!columns.includes("clients")) sql.exec("ALTER TABLE relays ADD COLUMN clients TEXT NOT NULL DEFAULT '[]'");
}
