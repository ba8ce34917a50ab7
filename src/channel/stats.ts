/**
 * A channel's stats (docs/api.md, GET /v1/channels/{channel}/stats), gathered from its parts.
 */

import type { ChannelStats } from "./calls";
import type { ChannelRecord } from "./record";
import type { ChannelRelays } from "./relays";
import type { ChannelStore } from "./store";

export function channelStats(
  store: ChannelStore,
  relays: ChannelRelays,
  record: ChannelRecord,
  lastSample: unknown,
  lastSummary: string | null,
): ChannelStats {
  const { websockets, sse } = relays.totals(Date.now());
  return {
    channel: store.channel,
    occupancy: websockets + sse,
    websockets,
    sse,
    relays: relays.activeCount,
    relay_sends_total: relays.sendsTotal,
    last_seq: store.counter("last_seq"),
    delivered_total: store.counter("delivered_total"),
    dropped_total: store.counter("dropped_total"),
    priority_total: store.counter("priority_total"),
    analytics_copy_failures_total: store.counter("copy_failures_total"),
    slow_consumers_closed: store.counter("slow_consumers_closed"),
    last_sample: lastSample,
    last_summary: lastSummary === null ? null : (JSON.parse(lastSummary) as unknown),
    record: record.isRecord() ? record.counts() : null,
    presence: relays.presenceStats(),
    readers: relays.readers.stats(),
  };
}
