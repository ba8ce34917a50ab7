/**
 * A Pusher event as a Floodgate message (docs/api.md, "The Pusher door"): its body is
 * `{"event","data"}` (what history, native subscribers and the record see), and its delivery details
 * ride beside it, never in it: the one connection it must skip (a client event's sender, the HTTP
 * API's `socket_id`) and, for a client event on a presence channel, its sender's `user_id`. Pure.
 */

import { utf8Length } from "../frame-text";

/** Longest event name (as the Pusher HTTP API's). */
export const EVENT_NAME_MAX = 200;

/**
 * Beginnings of the event names only the server sends: Pusher's protocol events, and Floodgate's own
 * on Pusher channels (`floodgate:summary`). Published by an app or a token, one would be taken by
 * pusher-js for the real thing (a `pusher_internal:member_added` adds a member who is not there).
 */
export const RESERVED_EVENT_PREFIXES = ["pusher:", "pusher_internal:", "floodgate:"] as const;

/** Why `name` may not be published (a reserved prefix), or null. */
export function reservedEventName(name: string): string | null {
  const prefix = RESERVED_EVENT_PREFIXES.find((p) => name.startsWith(p));
  return prefix ? `event names beginning "${prefix}" are reserved: only the server sends them` : null;
}

export interface EventMeta {
  /** The socket id of the connection that must not receive the event. */
  exclude?: string;
  /** A client event's sender on a presence channel. */
  user_id?: string;
}

/** The details as stored text, or undefined when there are none. */
export function eventMetaText(meta: EventMeta): string | undefined {
  return meta.exclude === undefined && meta.user_id === undefined ? undefined : JSON.stringify(meta);
}

/** Stored details read back (anything unreadable is none). */
export function readEventMeta(text: string | undefined): EventMeta {
  if (!text) return {};
  try {
    const v = JSON.parse(text) as EventMeta;
    return {
      ...(typeof v.exclude === "string" ? { exclude: v.exclude } : {}),
      ...(typeof v.user_id === "string" ? { user_id: v.user_id } : {}),
    };
  } catch {
    return {};
  }
}

/**
 * Most UTF-8 bytes a Pusher event's message body ({@link pusherBody}) may take when the API bounds its
 * `data` by `maxDataBytes`: twice the data, three bytes for each of the name's at most
 * {@link EVENT_NAME_MAX} characters, and the JSON around them. JSON escaping at most doubles text (a
 * quote, a backslash, `\n`…) except for the other control characters and lone surrogates, which take
 * six bytes each (`\u0001`): only text made mostly of those can go past it. Everything that holds a
 * stored message (history pages, a reader's held messages, the record's queue messages, a
 * connection's frames) is sized for it. Characters of the body are never more than its bytes.
 */
export function pusherBodyMax(maxDataBytes: number): number {
  return 2 * maxDataBytes + 3 * EVENT_NAME_MAX + '{"event":"","data":""}'.length;
}

/**
 * Why an event with this name and data may not be published — its `data` over `maxDataBytes` (UTF-8
 * bytes, as sent), or its stored body over {@link pusherBodyMax} — or null when it may. Its stored
 * body as well, so that it is made once.
 */
export function pusherEventSize(
  event: string,
  data: string,
  maxDataBytes: number,
): { body: string; problem: string | null } {
  if (utf8Length(data) > maxDataBytes) return { body: "", problem: `"data" is larger than ${maxDataBytes} bytes` };
  const body = pusherBody(event, data);
  const max = pusherBodyMax(maxDataBytes);
  if (utf8Length(body) <= max) return { body, problem: null };
  return {
    body,
    problem: `the event as stored ({"event","data"}, JSON-escaped) is larger than ${max} bytes: control characters other than \\b \\f \\n \\r \\t, and lone surrogates, take 6 bytes each there`,
  };
}

/** A Pusher event's message body as JSON text. */
export function pusherBody(event: string, data: string): string {
  return JSON.stringify({ event, data });
}

/**
 * A message body read as a Pusher event: `{"event": <1–200 characters, not reserved>, "data": <string>}`
 * and nothing else, or why it is not one.
 */
export function readPusherBody(value: unknown): { event: string; data: string } | { problem: string } {
  if (value === null || typeof value !== "object" || Array.isArray(value)) {
    return { problem: 'a message to a pusher: channel must be {"event","data"}' };
  }
  const o = value as Record<string, unknown>;
  for (const k of Object.keys(o)) {
    if (k !== "event" && k !== "data")
      return { problem: `a message to a pusher: channel has only "event" and "data", not "${k}"` };
  }
  if (typeof o.event !== "string" || o.event.length === 0 || o.event.length > EVENT_NAME_MAX) {
    return { problem: `"event" must be a string of 1 to ${EVENT_NAME_MAX} characters` };
  }
  const reserved = reservedEventName(o.event);
  if (reserved) return { problem: `"event": ${reserved}` };
  if (typeof o.data !== "string")
    return { problem: '"data" must be a string (JSON text, as the Pusher HTTP API takes it)' };
  return { event: o.event, data: o.data };
}
