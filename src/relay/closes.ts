/**
 * Subscriptions a relay ended, counted by reason for `/metrics` (docs/operations.md, "Metrics":
 * `floodgate_subscriptions_closed_total{reason}`), through its isolate's object metrics
 * (src/metrics/object-metrics.ts).
 */

import { countInObject } from "../metrics/object-metrics";
import type { CloseReason } from "../metrics/series";

/** `n` subscriptions ended for `reason` (WebSocket closes and SSE ends alike). */
export function countClosed(reason: CloseReason, n = 1): void {
  countInObject("floodgate_subscriptions_closed_total", { reason }, n);
}
