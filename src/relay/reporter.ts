/**
 * A relay's count reports to its channel (docs/api.md, "Relays"): after every change the relay tells
 * the channel its WebSockets, SSE streams, open subscriptions per client, the reservations that joined
 * and the subscribers closed as slow. One report is in flight at a time; changes meanwhile go in the
 * next; a report that failed is tried again by the relay's alarm ({@link REPORT_RETRY_MS}), so a
 * subscriber gone stops counting even when the report of it is lost. A relay left empty but kept for
 * a reserved slot reports again by its alarm when the channel says the slot lapses, and then leaves.
 */

import type { AlarmScheduler } from "../platform/alarm-scheduler";
import { REPORT_RETRY_MS } from "./bounds";
import type { ChannelForRelay, RelayReportAnswer } from "./calls";
import { countClosed } from "./closes";

/** Who this relay is; stored once it has a subscriber. */
export interface RelayIdentity {
  channel: string;
  relay: string;
  group: string;
  k: number;
}

/** What the reporter needs of its relay. */
export interface ReportingRelay {
  identity(): RelayIdentity | null;
  counts(): { websockets: number; sse: number };
  clientCounts(): [string, number][];
  /** Subscribers taking presence frames. */
  presenceCount(): number;
  /** A connection host's lane on a Pusher presence channel: `user_info`s to send (src/relay/calls.ts `infos`). */
  infos?(): [string, string | null][] | undefined;
  subscriberCount(): number;
  /**
   * Its thinned subscribers now, and the skips it has not reported yet (taken: `skipped` hears them
   * back when the report fails) (docs/api.md, "Each reader's rate").
   */
  readers?(): { thinned: number; skipped: number };
  unreported?(skipped: number): void;
  channel(): Pick<ChannelForRelay, "relayReport">;
  /** A report got through while the relay has subscribers: store what the channel heard. */
  store(): void;
  /** The channel answered `leave`. */
  leave(): void;
}

export class RelayReporter {
  /** Reservations of subscribers that joined since the last report. */
  joined: string[] = [];
  private slowClosed = 0;
  private reporting: Promise<RelayReportAnswer> | null = null;
  private nextReport: Promise<RelayReportAnswer> | null = null;
  /** The counts the channel last heard (stored): after a restart a difference is reported. */
  reported = { websockets: 0, sse: 0 };
  /**
   * The alarm reports even when the totals match what the channel heard: a report failed and none
   * has got through since (one client's socket closed, another's opened: per-client counts differ),
   * or the channel kept this relay empty for a reserved slot and said when to ask again.
   */
  private owed = false;

  constructor(
    private readonly relay: ReportingRelay,
    private readonly alarms: AlarmScheduler,
  ) {}

  /** Subscribers closed as slow, told with the next report (and counted in `/metrics`). */
  slow(n = 1): void {
    this.tellSlow(n);
    countClosed("slow", n);
  }

  /**
   * Subscribers closed as slow that `/metrics` counts elsewhere (a connection host counts in its own
   * buffer, src/connection-host/host-metrics.ts): told with the next report, for the channel's stats.
   */
  tellSlow(n = 1): void {
    this.slowClosed += n;
  }

  /** No report on its way, and the channel's view may be wrong: the alarm reports again. */
  due(): boolean {
    if (this.reporting) return false;
    const counts = this.relay.counts();
    return this.owed || counts.websockets !== this.reported.websockets || counts.sse !== this.reported.sse;
  }

  /** The relay starts over (it left its channel). */
  reset(): void {
    this.reported = { websockets: 0, sse: 0 };
    this.owed = false;
  }

  /** Counts changed: tell the channel (coalesced); a relay left empty then leaves. */
  changed(): void {
    if (!this.relay.identity()) return;
    this.report().then(
      (answer) => {
        if (answer.leave) this.relay.leave();
        else if (answer.askAgainAt !== undefined) {
          // Nothing else may happen on a quiet channel: the alarm asks again once the slot lapsed. Not
          // sooner than a retry: a clock ahead of the channel's would otherwise ask again at once.
          this.owed = true;
          this.alarms.request(Math.max(answer.askAgainAt, Date.now() + REPORT_RETRY_MS));
        }
      },
      (e) => {
        console.error("floodgate relay: could not report counts", e instanceof Error ? e.message : e);
        // Tried again even if nothing else changes: a subscriber gone must stop counting.
        this.owed = true;
        this.alarms.request(Date.now() + REPORT_RETRY_MS);
      },
    );
  }

  /**
   * One report in flight at a time; a report asked for meanwhile is the next one, made when the
   * first returns and carrying everything that changed by then (a join storm costs a few calls).
   */
  report(): Promise<RelayReportAnswer> {
    if (!this.reporting) {
      const sent = this.send();
      this.reporting = sent;
      sent.then(
        () => {
          if (this.reporting === sent) this.reporting = null;
        },
        () => {
          if (this.reporting === sent) this.reporting = null;
        },
      );
      return sent;
    }
    if (!this.nextReport) {
      this.nextReport = this.reporting
        .catch(() => null)
        .then(() => {
          this.nextReport = null;
          return this.report();
        });
    }
    return this.nextReport;
  }

  private async send(): Promise<RelayReportAnswer> {
    const id = this.relay.identity();
    if (!id) return { leave: true, head: 0 };
    const joined = this.joined;
    const slowClosed = this.slowClosed;
    this.joined = [];
    this.slowClosed = 0;
    const counts = this.relay.counts();
    const infos = this.relay.infos?.();
    const readers = this.relay.readers?.();
    try {
      const answer = await this.relay.channel().relayReport(id.channel, {
        relay: id.relay,
        group: id.group,
        k: id.k,
        websockets: counts.websockets,
        sse: counts.sse,
        clients: this.relay.clientCounts(),
        joined,
        slowClosed,
        presence: this.relay.presenceCount(),
        ...(infos && infos.length > 0 ? { infos } : {}),
        ...(readers ? { thinned: readers.thinned, skipped: readers.skipped } : {}),
      });
      this.reported = { websockets: counts.websockets, sse: counts.sse };
      this.owed = false;
      if (this.relay.subscriberCount() > 0) this.relay.store();
      return answer;
    } catch (e) {
      // Told again with the next report.
      this.joined.push(...joined);
      this.slowClosed += slowClosed;
      if (readers?.skipped) this.relay.unreported?.(readers.skipped);
      throw e;
    }
  }
}
