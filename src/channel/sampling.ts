/**
 * What the sampler (src/worker/sampler/sampler-run.ts) asks of a channel's object: the period's counts, the
 * decision to keep, and the channel's target.
 */

import type { TargetJson } from "../settings/targets";
import type { ChannelActivity } from "./activity";
import type { ChannelPeriod } from "./calls";
import type { ChannelFastLoop } from "./fast-loop";
import type { ChannelStore } from "./store";

export class ChannelSampling {
  /** The sampler's latest decision (stored in `meta` as `last_sample`). */
  lastSample: unknown = null;

  /**
   * @param occupancy subscribers of every relay, and those on their way to one.
   * @param ensureExpiry after a write: makes sure idle expiry will come (src/channel/idle-expiry.ts).
   */
  constructor(
    private readonly store: ChannelStore,
    private readonly fastLoop: ChannelFastLoop,
    private readonly activity: ChannelActivity,
    private readonly occupancy: () => number,
    private readonly ensureExpiry: () => void,
  ) {}

  load(meta: Map<string, string>): void {
    const sample = meta.get("last_sample");
    if (sample !== undefined) this.lastSample = JSON.parse(sample);
  }

  /** Deleted with everything else (idle expiry). */
  reset(): void {
    this.lastSample = null;
  }

  /**
   * Returns this period's counts and starts a new period (the sampler calls this once per run). The
   * sampler passes the channel's effective target (a runtime one included), which the fast loop uses
   * from then on.
   */
  takePeriod(now: number, target?: TargetJson | null): ChannelPeriod {
    const store = this.store;
    if (store.wiped) {
      // Nothing stored (never used, or expired as idle): a sampler visit must not bring it back.
      if (target !== undefined) this.fastLoop.setTarget(target);
      return {
        channel: store.channel,
        counts: { delivered: 0, dropped: 0, elapsedMs: 0, occupancy: this.occupancy() },
        startedAt: now,
        fastRate: this.fastLoop.currentRate(),
        fastDecidedAt: null,
      };
    }
    if (target !== undefined) this.fastLoop.setTarget(target);
    const started = store.counter("period_started_at") || now;
    const delivered = store.counter("period_delivered");
    const dropped = store.counter("period_dropped");
    const priority = store.counter("period_priority");
    store.set({ period_delivered: 0, period_dropped: 0, period_priority: 0, period_started_at: now, period_marked: 0 });
    this.ensureExpiry();
    return {
      channel: store.channel,
      counts: { delivered, dropped, priority, elapsedMs: Math.max(0, now - started), occupancy: this.occupancy() },
      startedAt: started,
      fastRate: this.fastLoop.currentRate(),
      fastDecidedAt: store.counter("fast_decided_at") || null,
      fastPoints: this.fastLoop.takePoints(),
    };
  }

  /**
   * Stores the sampler's latest decision so stats and the admin API can show it. A rate the sweep
   * decided itself (the fast loop had not decided since) becomes the fast loop's rate too, unless the
   * fast loop decided after the sweep began: both loops then answer with the same rate.
   */
  async recordSample(sample: {
    sampled_at: number;
    new_rate: number;
    decided_by?: "fast loop" | "sweep";
  }): Promise<void> {
    if (this.store.wiped) return; // a visit to a channel with nothing stored leaves nothing stored
    this.lastSample = sample;
    this.store.putMeta("last_sample", JSON.stringify(sample));
    // Only a rate the sweep decided itself: when the fast loop decided, the sample's rate is the one
    // the channel runs at (the fast rate, or the stored one when the change was too small to write).
    if (
      this.fastLoop.target() &&
      sample.decided_by !== "fast loop" &&
      sample.sampled_at >= this.store.counter("fast_decided_at")
    ) {
      this.fastLoop.setRate(sample.new_rate);
      if (sample.new_rate > 0) this.fastLoop.start(Date.now());
      await this.activity.settled(undefined);
    }
    this.ensureExpiry();
  }
}
