/**
 * A channel's traffic as the throttle sees it: each message counted for the sampler's period and the
 * fast loop's (src/channel/fast-loop.ts), and reported to the sampler's registry
 * (src/active-channels/active-channels.ts) so the sampler visits the channels that had traffic, busiest first.
 */

import { activeChannelsStub } from "../platform/stubs";
import { isAnalytics, targetFor } from "../settings/rules";
import { settingsOf } from "../settings/settings";
import { channelOfKey } from "../wire/channel-names";
import type { ChannelFastLoop } from "./fast-loop";
import type { ChannelStore, CounterValues } from "./store";

/** The order of magnitude of a period's message count, for the sampler's busiest-first order. */
function trafficWeight(count: number): number {
  return count < 1 ? 0 : Math.floor(Math.log10(count)) + 1;
}

export class ChannelActivity {
  /** An activity report to the sampler's registry in flight (once per period). */
  private marking: Promise<void> | null = null;
  /** When this object last told the registry it had traffic (channels the sampler does not visit). */
  private lastSeenReport = 0;
  /** Whether the sampler manages this channel; fixed for the object's life (config is per isolate). */
  private sampledCache: boolean | null = null;

  constructor(
    private readonly store: ChannelStore,
    private readonly fastLoop: ChannelFastLoop,
    private readonly env: Env,
  ) {}

  /** Deleted with everything else (idle expiry). */
  reset(): void {
    this.sampledCache = null;
    this.lastSeenReport = 0;
  }

  /**
   * Adds `deltas` to the counters; delivered and dropped messages among them (`period_*`) are traffic
   * (priority ones, `period_priority`, are counted as delivered first and then as priority):
   * they start the fast loop and count in its period too, start the sampler's period, and are
   * reported to the registry.
   */
  count(given: CounterValues): void {
    // Priority messages are counted beside their delivery (functions/sampler.ts, "Priority
    // messages"): in the fast loop's period too, once it runs.
    const deltas =
      given.period_priority && this.store.counter("fast_due_at")
        ? { ...given, fast_priority: (given.fast_priority ?? 0) + given.period_priority }
        : given;
    const traffic = (deltas.period_delivered ?? 0) + (deltas.period_dropped ?? 0);
    if (!traffic) {
      this.store.bump(deltas);
      return;
    }
    const now = Date.now();
    this.fastLoop.start(now);
    const also: CounterValues = {};
    if (this.store.counter("fast_due_at")) {
      also.fast_delivered = this.store.counter("fast_delivered") + (deltas.period_delivered ?? 0);
      also.fast_dropped = this.store.counter("fast_dropped") + (deltas.period_dropped ?? 0);
    }
    if (!this.store.counter("period_started_at")) also.period_started_at = now;
    this.store.bump(deltas, also);
    if (!this.marking && this.periodWeight() > this.store.counter("period_marked")) this.markActive();
  }

  /** Returns `value` once any activity report this call started has been made. */
  async settled<T>(value: T): Promise<T> {
    if (this.marking) await this.marking;
    return value;
  }

  /** This period's traffic as a weight for the sampler's order: 1 from 1 message, 2 from 10, 3 from 100, … */
  private periodWeight(): number {
    return trafficWeight(this.store.counter("period_delivered") + this.store.counter("period_dropped"));
  }

  /**
   * Reports the first traffic of a period to the sampler's registry, and again at each order of
   * magnitude of it (10, 100, … messages: a few calls per period, so the sampler can visit the busiest
   * first), only for a channel the sampler manages (one with a target; never the analytics channel). The RPC that
   * counted the traffic waits for it (see {@link settled}) so the report is never cut off; a
   * registry failure is logged and retried on the next message, and never fails a publish.
   */
  private markActive(): void {
    const channel = this.store.channel;
    if (!channel) return;
    if (!this.sampled(channel)) {
      this.reportSeen(channel);
      return;
    }
    const reported = this.store.counter("period_marked");
    const weight = this.periodWeight();
    this.store.set({ period_marked: weight });
    const registry = activeChannelsStub(this.env);
    this.marking = registry.markActive(channel, weight).then(
      (lastRunAt) => {
        // A channel idle through earlier runs starts its period at the last run, not long before.
        if (!this.store.wiped && lastRunAt && lastRunAt > this.store.counter("period_started_at")) {
          this.store.set({ period_started_at: lastRunAt });
        }
        this.marking = null;
        // Traffic that came while this report was in flight may have reached the next weight.
        if (!this.store.wiped && this.periodWeight() > this.store.counter("period_marked")) this.markActive();
      },
      (e) => {
        console.error(
          "floodgate: could not report channel activity to the sampler",
          e instanceof Error ? e.message : e,
        );
        if (!this.store.wiped) this.store.set({ period_marked: reported });
        this.marking = null;
      },
    );
  }

  /** At most once a minute: lets the dashboard list channels without a target too. */
  private reportSeen(channel: string): void {
    const now = Date.now();
    if (now - this.lastSeenReport < 60_000 || isAnalytics(settingsOf(this.env), channel)) return;
    this.lastSeenReport = now;
    const registry = activeChannelsStub(this.env);
    this.marking = registry.markSeen(channel, now).then(
      () => {
        this.marking = null;
      },
      () => {
        this.lastSeenReport = 0;
        this.marking = null;
      },
    );
  }

  private sampled(channel: string): boolean {
    this.sampledCache ??= this.computeSampled(channel);
    return this.sampledCache;
  }

  private computeSampled(channel: string): boolean {
    try {
      const config = settingsOf(this.env);
      if (isAnalytics(config, channel)) return false;
      return targetFor(config, channelOfKey(channel)) !== null;
    } catch {
      return false; // bad config or a name that is not a channel: nothing to sample
    }
  }
}
