/**
 * One relay's memory bound (docs/api.md, "Slow subscribers"): while the bytes waiting for all its
 * subscribers together exceed the cap ({@link RELAY_MAX_BUFFERED_BYTES}), the subscriber most behind
 * is closed as slow (4008; an SSE stream is cut off and its backlog discarded), after its last summary
 * like every slow close. A relay under the bound costs one pass over its subscribers.
 */

import { RELAY_MEMORY_REASON } from "../wire/close-codes";
import type { SseClient } from "./sse-hub";
import type { RelaySubscribers } from "./subscribers";

/** The bytes waiting on a relay's WebSockets, read in the pass that sent to them. */
export class SocketBacklog {
  total = 0;
  readonly behind: { bytes: number; sub: WebSocket | SseClient }[] = [];

  add(ws: WebSocket, bytes: number): void {
    if (bytes <= 0) return;
    this.total += bytes;
    this.behind.push({ bytes, sub: ws });
  }
}

/**
 * What closes a subscriber as slow (src/relay/thinned-stream.ts): counted before it is closed, so the
 * count report its close sets off carries it; a thinned one gets its last summary first.
 */
export interface SlowCloser {
  closeSlow(sub: WebSocket | SseClient, reason: string): void;
}

/**
 * Closes the most-behind subscribers until the rest fit in `maxBytes`, each through `closer`.
 * `sockets`: every open WebSocket's backlog, already read by a pass that sent to them all (a second
 * pass over a thousand sockets, each read a call into the runtime, was a share of a delivery's CPU);
 * without it they are read here.
 */
export function boundMemory(
  subs: RelaySubscribers,
  maxBytes: number,
  closer: SlowCloser,
  sockets?: SocketBacklog,
): void {
  let backlog = sockets;
  if (!backlog) {
    backlog = new SocketBacklog();
    for (const ws of subs.sockets()) backlog.add(ws, ws.bufferedAmount);
  }
  const behind = backlog.behind;
  let total = backlog.total;
  for (const client of subs.hub.all) {
    const bytes = subs.hub.backlog(client);
    total += bytes;
    if (bytes > 0) behind.push({ bytes, sub: client });
  }
  if (total <= maxBytes) return;
  behind.sort((a, b) => b.bytes - a.bytes);
  for (const { bytes, sub } of behind) {
    if (total <= maxBytes) break;
    total -= bytes;
    // Closed as slow after the pass that read its backlog: already counted, its bytes on their way out.
    if ("send" in sub && sub.readyState !== 1 /* OPEN */) continue;
    closer.closeSlow(sub, RELAY_MEMORY_REASON);
  }
}
