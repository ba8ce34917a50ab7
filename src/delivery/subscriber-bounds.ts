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
/** The close code for a WebSocket subscriber that fell too far behind; it may resume with `?after=`. */
export const SLOW_CONSUMER_CLOSE = 4008;
export const SLOW_CONSUMER_REASON = "slow consumer: over 1 MiB unread; reconnect with ?after=<last seq received>";
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
