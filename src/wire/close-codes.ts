/**
 * How a subscription is told it ended (docs/api.md, "Slow subscribers", "How long a subscription lasts", "Relays"): each WebSocket close code
 * Floodgate sends, with its reason. Pure and self-contained, so the TypeScript client ships it too.
 */

/** A subscription whose token expired; the client reconnects with a fresh token and `?after=`. */
export const TOKEN_EXPIRED_CLOSE = 4001;
export const TOKEN_EXPIRED_REASON = "token expired";
/**
 * The same close (and SSE `event: expired`) for a subscription whose session was revoked (a refresh
 * token of its chain was used twice, docs/security.md): a fresh token of that session is refused too.
 */
export const SESSION_REVOKED_REASON = "session revoked";
/**
 * The `expired` event's reason when an anonymous SSE stream reaches its longest lifetime
 * (docs/api.md, "How long a subscription lasts"): the reader reconnects with `Last-Event-ID`.
 */
export const STREAM_LIFETIME_REASON = "stream lifetime reached";

/**
 * A subscriber that fell too far behind: over 1 MiB unread after its relay thinned it to 1 message a
 * second (or a replay of over 1 MiB); it may resume with `?after=`.
 */
export const SLOW_CONSUMER_CLOSE = 4008;
export const SLOW_CONSUMER_REASON = "slow consumer: over 1 MiB unread; reconnect with ?after=<last seq received>";
/** The same close when its relay's memory for all subscribers together is full and it is the most behind. */
export const RELAY_MEMORY_REASON =
  "slow consumer: relay memory full, this one most behind; reconnect with ?after=<last seq received>";

/**
 * Subscribers of a relay that missed messages the channel no longer keeps: they are not sent anything
 * newer across the hole. Resuming with `?after=` replays what is still retained.
 */
export const HISTORY_GAP_CLOSE = 4009;
export const HISTORY_GAP_REASON =
  "missed messages are no longer in history; reconnect with ?after=<last seq received> for what is retained";

/** A subscriber that sent a frame other than `ping` (policy violation). */
export const SUBSCRIBER_SPOKE_CLOSE = 1008;
export const SUBSCRIBER_SPOKE_REASON = 'subscribers do not send frames; only "ping" is answered ("pong")';

/** The server could not go on serving the subscription (its relay failed); reconnect with `?after=`. */
export const INTERNAL_CLOSE = 1011;

/** A normal close: the other side closed, or went away without a code. */
export const NORMAL_CLOSE = 1000;
