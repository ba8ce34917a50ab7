/**
 * What a subscription's connections have in common, and the fallback between them: WebSocket where
 * the runtime has one, Server-Sent Events from the start where it has none, and for good once
 * WebSocket opens keep failing.
 */

export type Transport = "websocket" | "sse";

/** What one connection (./websocket.ts, ./sse.ts) tells the subscription that opened it. */
export interface ConnectionEvents {
  /** True once the subscription is closed: a connection that opens after that is closed at once. */
  isClosed(): boolean;
  /** The connection the subscription's `close()` ends from now on. */
  hold(connection: { close(): void }): void;
  /** The server accepted the subscription: messages flow. */
  live(): void;
  /** A WebSocket text frame or an SSE event's data: one frame, or an array of them. */
  frame(text: string): void;
  /** The server ended it because the token it was opened with expired (its last frame says where). */
  expired(): void;
  /** It dropped, ended or failed. */
  lost(error: unknown): void;
}

/** WebSocket opens that fail in a row before an `auto` subscription moves to SSE. */
const WEBSOCKET_FAILURES_BEFORE_SSE = 3;

/** The transport a subscription uses now, moving to SSE when WebSocket opens keep failing. */
export function transportFallback(
  asked: "auto" | "websocket" | "sse" | undefined,
  openWebSocket: unknown,
): { readonly current: Transport; opened(): void; failed(): void } {
  let current = initialTransport(asked, openWebSocket);
  let failures = 0;
  return {
    get current() {
      return current;
    },
    opened() {
      failures = 0;
    },
    failed() {
      failures++;
      if (asked !== "websocket" && failures >= WEBSOCKET_FAILURES_BEFORE_SSE) current = "sse";
    },
  };
}

/**
 * The transport a subscription starts on: SSE at once where `auto` has no WebSocket to use (Node 20
 * without `--experimental-websocket` and no `openWebSocket`), instead of failing three opens first.
 */
function initialTransport(asked: "auto" | "websocket" | "sse" | undefined, openWebSocket: unknown): Transport {
  if (asked === "sse") return "sse";
  if (asked === "websocket" || openWebSocket) return "websocket";
  return typeof (globalThis as { WebSocket?: unknown }).WebSocket === "function" ? "websocket" : "sse";
}
