/**
 * Subscriptions a relay ended, counted by reason for `/metrics` (docs/operations.md, "Metrics":
 * `floodgate_subscriptions_closed_total{reason}`). Relays run in isolates of their own, so each
 * isolate's relays count into one buffer and flush it to the metrics object the way the Worker's
 * does (src/metrics/metrics-buffer.ts): no close makes a call of its own.
 */
import { MetricsBuffer } from "../metrics/metrics-buffer";
import type { CloseReason } from "../metrics/series";
import { metricsStub } from "../platform/stubs";
import { settingsOf } from "../settings/settings";

let buffer: MetricsBuffer | null = null;
let defer: (p: Promise<unknown>) => void = () => {};

/** A relay of this isolate starts: the counts flush through its env, kept alive by its context. */
export function bindCloseCounts(env: Env, ctx: DurableObjectState): void {
  buffer ??= new MetricsBuffer(() => metricsStub(env), settingsOf(env).metricsFlushMs);
  defer = (p) => ctx.waitUntil(p);
}

/** `n` subscriptions ended for `reason` (WebSocket closes and SSE ends alike). */
export function countClosed(reason: CloseReason, n = 1): void {
  if (!buffer || !(n > 0)) return;
  buffer.inc("floodgate_subscriptions_closed_total", { reason }, n);
  buffer.schedule(defer);
}
