/** Where a subscription stands: its states, their changes told once each, and `ready`. */
import { FloodgateError } from "./errors.js";

/**
 * Where a subscription stands (as Ably's and PubNub's SDKs report it): `connecting` to its first
 * connection, `live` (subscribed: the server accepted it and messages flow), `reconnecting` after a
 * drop until it is live again, `closed` once `close()` was called.
 */
export type ConnectionState = "connecting" | "live" | "reconnecting" | "closed";

export interface StateChange {
  previous: ConnectionState;
  transport: "websocket" | "sse";
  /** What ended the previous connection, for `reconnecting`. */
  reason?: unknown;
}

/** A subscription's state: its changes told once each, and `ready` for its first `live`. */
export function connectionStates(
  transport: () => "websocket" | "sse",
  onState: ((state: ConnectionState, change: StateChange) => void) | undefined,
): { readonly current: ConnectionState; ready: Promise<void>; set(next: ConnectionState, reason?: unknown): void } {
  let current: ConnectionState = "connecting";
  let settle: { resolve: () => void; reject: (e: unknown) => void } | null = null;
  const ready = new Promise<void>((resolve, reject) => {
    settle = { resolve, reject };
  });
  // Nobody need await it: a subscription closed before it was live must not be an unhandled rejection.
  ready.catch(() => {});
  return {
    get current() {
      return current;
    },
    ready,
    set(next, reason) {
      if (next === current || current === "closed") return;
      const previous = current;
      current = next;
      if (next === "live") settle?.resolve();
      if (next === "closed") settle?.reject(new FloodgateError(0, "network", "subscription closed before it was live"));
      if (next === "live" || next === "closed") settle = null;
      const change: StateChange = { previous, transport: transport() };
      if (reason !== undefined) change.reason = reason;
      onState?.(next, change);
    },
  };
}
