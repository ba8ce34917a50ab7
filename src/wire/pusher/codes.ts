/**
 * The Pusher protocol's error and close codes Floodgate sends (docs/api.md, "The Pusher door"). A
 * code tells a Pusher client what to do: 4000–4099 do not reconnect, 4100–4199 reconnect after a
 * back-off, 4200–4299 reconnect at once, 4300–4399 other errors (the connection stays). Pure and
 * self-contained.
 */

/** A wrong key, or the door is closed (close; clients do not reconnect). */
export const PUSHER_APP_CLOSED = 4001;
/** A protocol version other than 5 to 7 (close). */
export const PUSHER_UNSUPPORTED_PROTOCOL = 4007;
/**
 * Over capacity: no connection host had room, or the connection fell too far behind (1 MiB unread)
 * or its host's memory for all its connections filled up (close; clients reconnect after a back-off).
 */
export const PUSHER_OVER_CAPACITY = 4100;
/**
 * Reconnect now: one of the connection's channels missed messages its history no longer holds, or
 * the server could not go on serving it (close; clients reconnect and subscribe again).
 */
export const PUSHER_RECONNECT = 4200;
/** No `pusher:pong` (or any frame) within 30 s of the server's `pusher:ping` (close). */
export const PUSHER_PONG_TIMEOUT = 4201;
/** A frame Floodgate cannot take: malformed, unknown, too large, or a client event it refuses (the connection stays). */
export const PUSHER_BAD_FRAME = 4300;
/** A client event past `PUSHER_CLIENT_EVENTS_RATE` (the connection stays; the event is not delivered). */
export const PUSHER_CLIENT_EVENT_RATE = 4301;

/** Seconds after the server's `pusher:ping` that a connection has to answer. */
export const PUSHER_PONG_WAIT_S = 30;

/** Most channels one connection is subscribed to at once. */
export const PUSHER_MAX_CHANNELS = 100;

/** Most bytes of one presence member's `user_info` (as JSON text). */
export const PUSHER_USER_INFO_MAX_BYTES = 1024;
