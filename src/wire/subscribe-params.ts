/**
 * How a subscriber asks for its stream (docs/api.md, GET /v1/subscribe/{channel}): the WebSocket
 * subprotocols, the query parameters and how each is read. The TypeScript client builds its query
 * with {@link subscribeQuery}; the Worker reads it with {@link readSubscribeQuery}. Pure and
 * self-contained: the client package ships it, compiled for Node, so its relative imports carry `.js`.
 */
import { type ApiError, invalidArgument } from "./errors.js";

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
  /**
   * The epoch `after` counts in (docs/api.md, "Numbering restarts"): one that is no longer the
   * channel's replays everything kept from seq 1. Only with `after`.
   */
  epoch?: string;
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
  if (p.after !== undefined && p.epoch !== undefined) q.set("epoch", p.epoch);
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

/** What an epoch is: 1–64 characters of `[A-Za-z0-9_-]` (docs/api.md, "Numbering restarts"). */
const EPOCH = /^[A-Za-z0-9_-]{1,64}$/;

/** An `epoch` parameter, or null when absent. @throws ApiError 400 */
export function epochParam(value: string | undefined | null, name = "epoch"): string | null {
  if (value === undefined || value === null) return null;
  if (!EPOCH.test(value)) throw invalidArgument(`${name} must be 1 to 64 characters of A-Z, a-z, 0-9, _ and -`);
  return value;
}

/**
 * Where a resume starts (docs/api.md, "Numbering restarts"): `after` as asked while `epoch` is the
 * channel's (or not given); 0, everything kept from seq 1, when `epoch` is no longer the channel's
 * (its seq started again since: the old `after` counts in a numbering that is gone), and when `after`
 * is past the head with no `epoch` given (only a restart explains it); `"beyond"` when `after` is past
 * the head of the epoch it names — answered 400, never resumed from a seq that skips the new
 * messages. Null: no resume asked. `current.epoch` is "" for a channel that stores nothing (no epoch is its own).
 */
export function resumePoint(
  after: number | null,
  epoch: string | null,
  current: { epoch: string; head: number },
): number | null | "beyond" {
  if (after === null) return null;
  if (epoch !== null && epoch !== current.epoch) return 0;
  if (after <= current.head) return after;
  // Past the head: impossible in the epoch named (400); with none named, only a restart explains it,
  // so everything kept is replayed — a client that never learnt epochs keeps working after a wipe.
  return epoch === null ? 0 : "beyond";
}

/** The 400 of a resume past the channel's head (see {@link resumePoint}). */
export function beyondHead(after: number, head: number): ApiError {
  return invalidArgument(
    `after ${after} is beyond the channel's last seq ${head} in its current epoch: resume with the epoch of the last message you received (?epoch=), or from after=0`,
  );
}

/**
 * A subscribe's parameters from its query (`get`) and, for SSE, its `Last-Event-ID` (`?after` wins):
 * `<epoch>:<seq>` as Floodgate sends event ids, or a bare seq. `epoch` counts only with `after`.
 * `batch` is checked on SSE too, which sends one event per message either way. `maxRate` is the
 * `max_rate` text as given (null: absent); its value is read where rates are (the Worker's route).
 * @throws ApiError 400
 */
export function readSubscribeQuery(
  get: (name: string) => string | undefined,
  lastEventId: string | undefined | null,
): { after: number | null; epoch: string | null; batch: boolean; presence: boolean; maxRate: string | null } {
  const batch = switchParam("batch", get("batch"));
  const presence = switchParam("presence", get("presence"));
  let after = wholeParam(get("after"), "after");
  let epoch = epochParam(get("epoch"));
  if (after === null && lastEventId !== undefined && lastEventId !== null) {
    const colon = lastEventId.lastIndexOf(":");
    epoch = colon < 0 ? null : epochParam(lastEventId.slice(0, colon), "Last-Event-ID's epoch");
    after = wholeParam(lastEventId.slice(colon + 1), "Last-Event-ID");
  }
  return { after, epoch: after === null ? null : epoch, batch, presence, maxRate: get("max_rate") ?? null };
}
