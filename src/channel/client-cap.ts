/**
 * One client cannot take a channel (docs/api.md, "Relays"; docs/security.md): at most
 * `MAX_SUBSCRIPTIONS_PER_CLIENT` open subscriptions per channel per client, counted by the channel's
 * relay registry (src/channel/relay-registry.ts) from its reservations and its relays' reports.
 *
 * The client is the verified token's `sub`, or without one the client IP (an IPv6 address as its
 * /64, src/worker/http/params.ts `clientIp`): one subscriber usually holds a whole /64. The two kinds are
 * prefixed apart, so a subject named like an address never shares an address's count.
 *
 * Anonymous crowds cannot lock token holders out (docs/api.md, "Relays"): on a public channel,
 * anonymous clients (`ip:` keys) together hold at most `ANONYMOUS_SHARE` × `MAX_SUBSCRIBERS` (past it
 * 503, while token holders still get in), and those of one IPv6 /48 at most {@link NET_SHARE} ×
 * `MAX_SUBSCRIPTIONS_PER_CLIENT` (429): a /48 holds 65,536 /64s, each otherwise a client of its own.
 */
import { ApiError, unavailable } from "../wire/errors";

/**
 * `Retry-After` of a subscribe refused at the client's cap. The client frees a slot by closing one
 * of its own subscriptions; one that went away without closing stops counting within 30 s.
 */
export const CLIENT_CAP_RETRY_AFTER_S = 5;

/** The key a subscription is counted under: `sub:<sub>`, else `ip:<ip or /64>` (`ip:unknown` without one). */
export function clientKey(sub: string | null, ip: string | null): string {
  return sub !== null ? `sub:${sub}` : `ip:${ip ?? "unknown"}`;
}

/** The client IP of an anonymous key (`ip:<ip or /64>`), or null for a subject or `ip:unknown`. */
export function ipOf(key: string): string | null {
  return isAnonymous(key) && key !== "ip:unknown" ? key.slice(3) : null;
}

/** Held without a verified token (a Pusher subscription to a public channel included): `ip:` keys. */
export function isAnonymous(key: string): boolean {
  return key.startsWith("ip:");
}

/**
 * The IPv6 /48 an anonymous key's /64 lies in (`ip:2001:db8:1::/48`), or null for an IPv4 address, a
 * subject or `ip:unknown`: one site usually holds a /48, i.e. 65,536 /64s, each a client of its own.
 */
export function netOf(key: string): string | null {
  if (!isAnonymous(key) || !key.includes(":", 3)) return null;
  return `ip:${key.slice(3).split(":").slice(0, 3).join(":")}::/48`;
}

/** Anonymous clients of one /48 hold at most this many times `MAX_SUBSCRIPTIONS_PER_CLIENT` of a channel. */
export const NET_SHARE = 10;

/** The 429 of a subscribe past its /48's cap, shaped like the client's own (bucket `subscriptions`). */
export function netCapError(maxPerNet: number): ApiError {
  return new ApiError(
    "rate_limited",
    "too many open subscriptions to this channel from one network (10 x MAX_SUBSCRIPTIONS_PER_CLIENT per IPv6 /48)",
    { bucket: "subscriptions", retry_after_ms: String(CLIENT_CAP_RETRY_AFTER_S * 1000) },
    {
      "Retry-After": String(CLIENT_CAP_RETRY_AFTER_S),
      "RateLimit-Policy": `"subscriptions";q=${maxPerNet}`,
      RateLimit: `"subscriptions";r=0;t=${CLIENT_CAP_RETRY_AFTER_S}`,
    },
  );
}

/** `Retry-After` of an anonymous subscribe past `ANONYMOUS_SHARE`, as of one past `MAX_SUBSCRIBERS`. */
export const ANONYMOUS_RETRY_AFTER_S = 5;

/** The 503 of an anonymous subscribe past the channel's anonymous share: a token still gets in. */
export function anonymousFullError(): ApiError {
  return unavailable(
    "anonymous_subscribers",
    "channel has as many anonymous subscribers as it admits (ANONYMOUS_SHARE of MAX_SUBSCRIBERS); retry later or subscribe with a token",
    ANONYMOUS_RETRY_AFTER_S,
  );
}

/**
 * What one channel admits, from the settings: `MAX_SUBSCRIBERS`, the client's cap, and the
 * anonymous bounds — none on a private channel, where every subscription was granted (a Pusher
 * private subscription is counted by IP but authorized).
 */
export interface Admission {
  maxSubscribers: number;
  maxPerClient: number;
  /** Most subscriptions anonymous clients hold together (Infinity: no bound). */
  maxAnonymous: number;
  /** Most subscriptions anonymous clients of one IPv6 /48 hold together (Infinity: no bound). */
  maxPerNet: number;
}

export function admissionOf(
  s: { maxSubscribers: number; maxSubscriptionsPerClient: number; anonymousShare: number },
  visibility: "public" | "private",
): Admission {
  const open = visibility === "public";
  return {
    maxSubscribers: s.maxSubscribers,
    maxPerClient: s.maxSubscriptionsPerClient,
    maxAnonymous: open ? Math.floor(s.anonymousShare * s.maxSubscribers) : Number.POSITIVE_INFINITY,
    maxPerNet: open ? NET_SHARE * s.maxSubscriptionsPerClient : Number.POSITIVE_INFINITY,
  };
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
