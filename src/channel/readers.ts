/**
 * What a channel's relays tell it of the subscribers they thin (docs/api.md, "Each reader's rate"),
 * for its stats: how many are thinned now — each relay's count as its last report gave it (a
 * subscriber with a `max_rate`, or one its relay thins for reading too slowly) — and the messages
 * skipped for them in all. The channel does no work per message for them: each relay counts its own
 * and reports with its count reports.
 */
import type { RelayReport } from "../relay/calls";
import type { ChannelStore } from "./store";

export class ChannelReaders {
  /** Subscribers thinned now, per relay (memory only: relays report it again after a restart). */
  private readonly thinnedBy = new Map<string, number>();

  constructor(private readonly store: ChannelStore) {}

  /** A relay's report; `left`: the relay left the channel. */
  reported(report: RelayReport, left: boolean): void {
    if (left || !(report.thinned && report.thinned > 0)) this.thinnedBy.delete(report.relay);
    else this.thinnedBy.set(report.relay, Math.min(report.thinned, report.websockets + report.sse));
    if (report.skipped && report.skipped > 0 && Number.isSafeInteger(report.skipped)) {
      this.store.bump({ readers_skipped_total: report.skipped });
    }
  }

  /** Stats' `readers` (docs/api.md, GET /v1/channels/{channel}/stats). */
  stats(): { thinned: number; skipped_total: number } {
    let thinned = 0;
    for (const n of this.thinnedBy.values()) thinned += n;
    return { thinned, skipped_total: this.store.counter("readers_skipped_total") };
  }

  /** Deleted with everything else (idle expiry). */
  reset(): void {
    this.thinnedBy.clear();
  }
}
