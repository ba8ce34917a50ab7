/**
 * Counts made inside Durable Objects (docs/operations.md, "Metrics"): the subscriptions relays end,
 * the frames a channel lets go on its lines to relays. Objects run in isolates of their own, so each
 * isolate's objects count into one buffer and flush it to the metrics object the way the Worker's does
 * (./metrics-buffer.ts): no event makes a call of its own. The flush runs on the object's own timer
 * (`waitUntil` does nothing in a Durable Object), within `METRICS_FLUSH_MS` of the count.
 */
import { metricsStub } from "../platform/stubs";
import { settingsOf } from "../settings/settings";
import { MetricsBuffer } from "./metrics-buffer";

let buffer: MetricsBuffer | null = null;

/** An object of this isolate starts: the counts flush through its env (the same for every object). */
export function bindObjectMetrics(env: Env): void {
  buffer ??= new MetricsBuffer(() => metricsStub(env), settingsOf(env).metricsFlushMs);
}

/** Counts `n` events of a series; flushed soon. Nothing before an object bound the buffer. */
export function countInObject(name: string, labels: Record<string, string>, n = 1): void {
  if (!buffer || !(n > 0)) return;
  buffer.inc(name, labels, n);
  buffer.schedule(() => {});
}
