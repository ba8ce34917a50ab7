/**
 * What a subscriber may cost and how it is told it went too far (docs/api.md, "Bounds"): the byte
 * bound on how far behind a subscriber may fall, and the close codes a relay uses.
 */

/**
 * Bytes a subscriber may be behind — a WebSocket's unread `bufferedAmount`, an SSE stream's queued
 * bytes, or a replay on connect — before it is closed ({@link SLOW_CONSUMER_CLOSE}; an SSE stream
 * ends): 1 MiB, about 7,000 typical frames or 32 of the largest (docs/api.md, "Slow subscribers").
 */
export const SUBSCRIBER_MAX_BEHIND_BYTES = 1024 * 1024;
/**
 * Most bytes one packed frame carries (a subscriber with `?batch=1`, docs/api.md, "Packed frames"):
 * what is pending past it goes in the next frame. Also what a relay holds back for `FRAME_DELAY`
 * at most: a full frame is sent at once.
 */
export const FRAME_MAX_BYTES = 1024 * 1024;
/** The close code for a WebSocket subscriber that fell too far behind; it may resume with `?after=`. */
export const SLOW_CONSUMER_CLOSE = 4008;
export const SLOW_CONSUMER_REASON = "slow consumer: over 1 MiB unread; reconnect with ?after=<last seq received>";
/**
 * Bytes waiting in one relay for all its subscribers together (WebSockets' `bufferedAmount`, SSE
 * streams' queued bytes) before the most-behind are closed with {@link SLOW_CONSUMER_CLOSE}: 32 MiB.
 * A Durable Object's isolate has 128 MB, shared with the runtime, the relay's own state, replay and
 * repair pages ({@link PAGE_MAX_BYTES} each) and possibly other objects of the class; the per-subscriber
 * bound alone would allow `RELAY_CAPACITY` × 1 MiB (1,000 MiB with the defaults). A quarter of the
 * isolate still holds 32 subscribers at the per-subscriber bound, or every subscriber of a full relay
 * 32 KiB behind.
 */
export const RELAY_MAX_BUFFERED_BYTES = 32 * 1024 * 1024;
export const RELAY_MEMORY_REASON =
  "slow consumer: relay memory full, this one most behind; reconnect with ?after=<last seq received>";
/** The close code for a subscription whose token expired; the client reconnects with a fresh token and `?after=`. */
export const TOKEN_EXPIRED_CLOSE = 4001;
export const TOKEN_EXPIRED_REASON = "token expired";
/**
 * How often a relay writes a comment line to each SSE stream: at most 15 s apart, so proxies keep the
 * stream open, and the write is what finds a reader that went away (an aborted stream is noticed only
 * when something is written to it). 10 s, so a reader gone is found and reported within 30 s even if
 * only the second write after it left fails.
 */
export const SSE_HEARTBEAT_MS = 10_000;
/** When a count report failed, the relay tries again this much later even if nothing else changes. */
export const REPORT_RETRY_MS = 5_000;
/** The close code for a subscriber that sent a frame other than `ping` (policy violation). */
export const SUBSCRIBER_SPOKE_CLOSE = 1008;
export const SUBSCRIBER_SPOKE_REASON = 'subscribers do not send frames; only "ping" is answered ("pong")';
/**
 * The close code for subscribers of a relay that missed messages the channel no longer keeps
 * (docs/api.md, "Relays"): they are not sent anything newer across the hole. Resuming with `?after=`
 * replays what is still retained, as a resume always does; `GET /v1/history` shows the same.
 */
export const HISTORY_GAP_CLOSE = 4009;
export const HISTORY_GAP_REASON =
  "missed messages are no longer in history; reconnect with ?after=<last seq received> for what is retained";
/**
 * Most bytes of messages one history page, export page, relay repair or catch-up carries (at least
 * one message). The analytics channel keeps far more than `HISTORY_LIMIT`, and a page of 1,000 of
 * the largest copies would be 33 MB in one call; with the shipped `HISTORY_LIMIT` other channels
 * never reach it.
 */
export const PAGE_MAX_BYTES = 4 * 1024 * 1024;
