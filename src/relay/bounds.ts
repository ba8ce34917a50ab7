/**
 * What a subscriber and a relay may cost (docs/api.md, "Bounds"): how far behind a subscriber may
 * fall, how much waits in one relay, how big a frame or a page is, and the relay's timings. How a
 * subscriber is told it went too far is the wire's (src/wire/close-codes.ts).
 */

/**
 * Bytes a subscriber may be behind — a WebSocket's unread `bufferedAmount`, an SSE stream's queued
 * bytes, or a replay on connect: 1 MiB, about 7,000 typical frames or 32 of the largest native ones
 * (15 of the largest Pusher events, stored at up to twice their data) (docs/api.md,
 * "Slow subscribers"). A live one past half of it is thinned (src/relay/slowness.ts) and closed
 * (`SLOW_CONSUMER_CLOSE`; an SSE stream ends) only when still over it at 1 message a second; a replay
 * past it is cut short and closed.
 */
export const SUBSCRIBER_MAX_BEHIND_BYTES = 1024 * 1024;
/**
 * Most bytes one packed frame carries (a subscriber with `?batch=1`, docs/api.md, "Packed frames"):
 * what is pending past it goes in the next frame. Also what a relay holds back for `FRAME_DELAY`
 * at most: a full frame is sent at once.
 */
export const FRAME_MAX_BYTES = 1024 * 1024;
/**
 * Bytes waiting in one relay for all its subscribers together (WebSockets' `bufferedAmount`, SSE
 * streams' queued bytes) before the most-behind are closed (`SLOW_CONSUMER_CLOSE`): 32 MiB.
 * A Durable Object's isolate has 128 MB, shared with the runtime, the relay's own state, replay and
 * repair pages ({@link PAGE_MAX_BYTES} each) and possibly other objects of the class; the per-subscriber
 * bound alone would allow `RELAY_CAPACITY` × 1 MiB (1,000 MiB with the defaults). A quarter of the
 * isolate still holds 32 subscribers at the per-subscriber bound, or every subscriber of a full relay
 * 32 KiB behind.
 */
export const RELAY_MAX_BUFFERED_BYTES = 32 * 1024 * 1024;
/**
 * How often a relay writes a comment line to each SSE stream: at most 15 s apart, so proxies keep the
 * stream open, and the write is what finds a reader that went away (an aborted stream is noticed only
 * when something is written to it). 10 s, so a reader gone is found and reported within 30 s even if
 * only the second write after it left fails.
 */
export const SSE_HEARTBEAT_MS = 10_000;
/**
 * Longest an anonymous SSE stream lasts (docs/security.md): 24 h, as long as the longest access
 * token, so no stream outlives what a token holder's could. It then ends with `event: expired`
 * carrying its position as `id`, and the reader (an EventSource too) reconnects with `Last-Event-ID`
 * and misses nothing. Anonymous WebSockets are not ended: a hibernated one costs its relay nothing.
 */
export const SSE_ANONYMOUS_MAX_MS = 24 * 60 * 60 * 1000;
/** When a count report failed, the relay tries again this much later even if nothing else changes. */
export const REPORT_RETRY_MS = 5_000;
/**
 * Most bytes of messages one history page, export page, relay repair or catch-up carries (at least
 * one message). The analytics channel keeps far more than `HISTORY_LIMIT`, and a page of 1,000 of
 * the largest copies would be 33 MB in one call; with the shipped `HISTORY_LIMIT` other channels
 * reach it only with Pusher events stored near twice MAX_MESSAGE_BYTES (about 63 of them).
 */
export const PAGE_MAX_BYTES = 4 * 1024 * 1024;
