/**
 * How a subscriber asks for its stream (docs/api.md, GET /v1/subscribe/{channel}): the WebSocket
 * subprotocols, the query parameters and how each is read. The TypeScript client builds its query
 * with {@link subscribeQuery}; the Worker reads it with {@link readSubscribeQuery}. Pure and
 * self-contained: the client package ships it, compiled for Node, so its relative imports carry `.js`.
 */
import { invalidArgument } from "./errors.js";

/**
 * The WebSocket subprotocol a browser offers with its token, since a browser cannot set headers on a
 * WebSocket: `new WebSocket(url, ["floodgate", "bearer.<token>"])`. The upgrade is answered with
 * `floodgate`, never with the token.
 */
export const WS_PROTOCOL = "floodgate";
/** The prefix of the subprotocol that carries the token. */
export const WS_BEARER_PREFIX = "bearer.";

/** What a subscribe asks for besides its channel and token. */
export interface SubscribeParams {
  /** Replay retained messages with a higher seq first (SSE: also `Last-Event-ID`). */
  after?: number;
  /** Packed frames: every WebSocket text frame a JSON array of frames (docs/api.md, "Packed frames"). */
  batch?: boolean;
  /** Presence frames too (docs/api.md, "Presence"). */
  presence?: boolean;
  /**
   * At most this many messages a second, as a rate shorthand (`5/s`, `120/m`: 1/s to 1000/s), the
   * rest skipped or held per key and counted in subscriber summaries (docs/api.md, "Each reader's rate").
   */
  maxRate?: string;
}

/** The query string of a subscribe asking for `p` (parameters left out are off). */
export function subscribeQuery(p: SubscribeParams): URLSearchParams {
  const q = new URLSearchParams();
  if (p.after !== undefined) q.set("after", String(p.after));
  if (p.batch) q.set("batch", "1");
  if (p.presence) q.set("presence", "1");
  if (p.maxRate !== undefined) q.set("max_rate", p.maxRate);
  return q;
}

/** A non-negative integer query parameter, or null when absent. @throws ApiError 400 */
export function wholeParam(
  value: string | undefined | null,
  name: string,
  max = Number.MAX_SAFE_INTEGER,
): number | null {
  if (value === undefined || value === null) return null;
  if (!/^\d{1,16}$/.test(value) || Number(value) > max) {
    throw invalidArgument(`${name} must be a whole number between 0 and ${max}`);
  }
  return Number(value);
}

/** A `0`/`1` switch: `0` or absent, off; `1`, on; anything else 400. @throws ApiError 400 */
export function switchParam(name: string, value: string | undefined | null): boolean {
  if (value === undefined || value === null || value === "0") return false;
  if (value === "1") return true;
  throw invalidArgument(`${name} must be 0 or 1`);
}

/**
 * A subscribe's parameters from its query (`get`) and, for SSE, its `Last-Event-ID` (`?after` wins).
 * `batch` is checked on SSE too, which sends one event per message either way. `maxRate` is the
 * `max_rate` text as given (null: absent); its value is read where rates are (the Worker's route).
 * @throws ApiError 400
 */
export function readSubscribeQuery(
  get: (name: string) => string | undefined,
  lastEventId: string | undefined | null,
): { after: number | null; batch: boolean; presence: boolean; maxRate: string | null } {
  const batch = switchParam("batch", get("batch"));
  const presence = switchParam("presence", get("presence"));
  let after = wholeParam(get("after"), "after");
  if (after === null && lastEventId !== undefined) after = wholeParam(lastEventId, "Last-Event-ID");
  return { after, batch, presence, maxRate: get("max_rate") ?? null };
}
