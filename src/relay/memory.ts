/**
 * One relay's memory bound (docs/api.md, "Slow subscribers"): while the bytes waiting for all its
 * subscribers together exceed the cap ({@link RELAY_MAX_BUFFERED_BYTES}), the subscriber most behind
 * is closed (4008; an SSE stream is cut off and its backlog discarded). A relay under the bound costs
 * one pass over its subscribers.
 */

import { RELAY_MEMORY_REASON, SLOW_CONSUMER_CLOSE } from "../wire/close-codes";
import type { RelaySubscribers, Subscriber } from "./subscribers";

/** The bytes waiting on a relay's WebSockets, read in the pass that sent to them. */
export class SocketBacklog {
  total = 0;
  readonly behind: { bytes: number; sub: Subscriber }[] = [];

  add(ws: WebSocket, bytes: number): void {
    if (bytes <= 0) return;
    this.total += bytes;
    this.behind.push({ bytes, sub: { ws } });
  }
}

/**
 * Closes the most-behind subscribers until the rest fit in `maxBytes`. `slow` counts each before it
 * is closed, so the count report its close sets off carries it. `sockets`: every open WebSocket's
 * backlog, already read by a pass that sent to them all (a second pass over a thousand sockets, each
 * read a call into the runtime, was a share of a delivery's CPU); without it they are read here.
 */
export function boundMemory(subs: RelaySubscribers, maxBytes: number, slow: () => void, sockets?: SocketBacklog): void {
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
    if (bytes > 0) behind.push({ bytes, sub: { sse: client } });
  }
  if (total <= maxBytes) return;
  behind.sort((a, b) => b.bytes - a.bytes);
  for (const { bytes, sub } of behind) {
    if (total <= maxBytes) break;
    // Closed as slow after the pass that read its backlog: already counted, its bytes on their way out.
    if ("ws" in sub && sub.ws.readyState !== 1 /* OPEN */) {
      total -= bytes;
      continue;
    }
    total -= bytes;
    slow();
    if ("ws" in sub) subs.closeSocket(sub.ws, SLOW_CONSUMER_CLOSE, RELAY_MEMORY_REASON);
    else subs.hub.cut(sub.sse);
  }
}
