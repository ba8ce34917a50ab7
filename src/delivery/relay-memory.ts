/**
 * One relay's memory bound (docs/api.md, "Slow subscribers"): while the bytes waiting for all its
 * subscribers together exceed the cap ({@link RELAY_MAX_BUFFERED_BYTES}), the subscriber most behind
 * is closed (4008; an SSE stream is cut off and its backlog discarded). A relay under the bound costs
 * one pass over its subscribers.
 */
import type { RelaySubscribers, Subscriber } from "./relay-subscribers";
import { RELAY_MEMORY_REASON, SLOW_CONSUMER_CLOSE } from "./subscriber-bounds";

/**
 * Closes the most-behind subscribers until the rest fit in `maxBytes`. `slow` counts each before it
 * is closed, so the count report its close sets off carries it.
 */
export function boundMemory(subs: RelaySubscribers, maxBytes: number, slow: () => void): void {
  const behind: { bytes: number; sub: Subscriber }[] = [];
  let total = 0;
  for (const ws of subs.sockets()) {
    const bytes = ws.bufferedAmount;
    total += bytes;
    if (bytes > 0) behind.push({ bytes, sub: { ws } });
  }
  for (const client of subs.hub.all) {
    const bytes = subs.hub.backlog(client);
    total += bytes;
    if (bytes > 0) behind.push({ bytes, sub: { sse: client } });
  }
  if (total <= maxBytes) return;
  behind.sort((a, b) => b.bytes - a.bytes);
  for (const { bytes, sub } of behind) {
    if (total <= maxBytes) break;
    total -= bytes;
    slow();
    if ("ws" in sub) subs.closeSocket(sub.ws, SLOW_CONSUMER_CLOSE, RELAY_MEMORY_REASON);
    else subs.hub.cut(sub.sse);
  }
}
