/**
 * A Pusher event as a Floodgate message (docs/api.md, "The Pusher door"): its body is
 * `{"event","data"}` (what history, native subscribers and the record see), and its delivery details
 * ride beside it, never in it: the one connection it must skip (a client event's sender, the HTTP
 * API's `socket_id`) and, for a client event on a presence channel, its sender's `user_id`. Pure.
 */

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
 * Most characters a Pusher event's message body ({@link pusherBody}) can hold when its `data` is at
 * most `maxDataBytes` UTF-8 bytes (the API bounds `data`, not the body): JSON escapes one byte as at
 * most six characters (a control character as `\u00XX`), and the event name likewise.
 */
export function pusherBodyMax(maxDataBytes: number): number {
  return 6 * (maxDataBytes + EVENT_NAME_MAX) + '{"event":"","data":""}'.length;
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
