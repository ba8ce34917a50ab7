// The record's counters as `npm run bench:analytics` reads them from /metrics, for its floods and
// its storage faults (./faults.mjs): what was dropped, recorded, failed and still unsettled, and what
// the record cost.
import { metrics } from "../lib/bench.mjs";

/** Each count's name, and the /metrics series it is read from. */
export const COUNTERS = {
  dropped: 'floodgate_messages_total{result="dropped"}',
  recorded: "floodgate_record_copies_total",
  failed: "floodgate_record_failures_total",
  unsettled: "floodgate_analytics_copies_unsettled_total",
  analyticsFailed: "floodgate_analytics_copy_failures_total",
  messages: "floodgate_record_queue_messages_total",
  writes: "floodgate_record_objects_written_total",
};

/** Every count now (0 for a series not yet shown). */
export async function counts(fg) {
  const m = await metrics(fg);
  return Object.fromEntries(Object.entries(COUNTERS).map(([k, series]) => [k, m[series] ?? 0]));
}

/**
 * Waits until every drop since `before` is recorded or a counted failure, or nothing moved for
 * `quietMs`, polling every `pollMs`; answers each count's change since `before`.
 */
export async function settled(fg, before, { quietMs, pollMs }) {
  let last = -1;
  let movedAt = Date.now();
  for (;;) {
    const now = await counts(fg);
    const d = Object.fromEntries(Object.keys(COUNTERS).map((k) => [k, now[k] - before[k]]));
    const landed = d.recorded + d.failed;
    if (landed === d.dropped) return d;
    if (landed !== last) {
      last = landed;
      movedAt = Date.now();
    } else if (Date.now() - movedAt > quietMs) return d;
    await new Promise((res) => setTimeout(res, pollMs));
  }
}
