/**
 * The throttle's fast loop in a channel's object (docs/throttling.md, "Two loops"): while the channel
 * is busy or throttled, an alarm every `SAMPLER_FAST_PERIOD` ends a period and applies the decision
 * of functions/fast-loop.ts to it; every answer to a publish or a drop report carries the resulting
 * rate back to the Worker isolate that sent it.
 */
import { fastLoopStep } from "../../functions/fast-loop";
import { FAST_POINTS_HELD, fastLoopPoint, type SeriesPoint } from "../active-channels/series";
import type { AlarmScheduler } from "../platform/alarm-scheduler";
import { targetFor } from "../settings/rules";
import { settingsOf } from "../settings/settings";
import type { Target, TargetJson } from "../settings/targets";
import { type ChannelName, channelOfKey } from "../wire/channel-names";
import type { ChannelRate } from "./calls";
import type { ChannelStore } from "./store";

export class ChannelFastLoop {
  /** The fast loop's current drop rate (stored in `meta` as `fast_rate`). */
  private rate = 0;
  /** When a lost fast-loop alarm was last re-armed (epoch ms). */
  private rearmedAt = 0;
  /** The target the sampler or the admin API last gave this channel; undefined: never told. */
  private toldTarget: TargetJson | null | undefined = undefined;
  /** The fast loop's target in messages per second; undefined until computed. */
  private targetCache: Target | null | undefined = undefined;
  /**
   * The decisions since the sweep last visited, for the dashboard's series (src/active-channels/series.ts).
   * In memory only: an object evicted between two visits loses a few points of a chart, nothing else.
   */
  private points: SeriesPoint[] = [];

  /** @param occupancy subscribers of every relay, and those on their way to one. */
  constructor(
    private readonly store: ChannelStore,
    private readonly scheduler: AlarmScheduler,
    private readonly env: Env,
    private readonly occupancy: () => number,
  ) {}

  load(meta: Map<string, string>): void {
    const rate = meta.get("fast_rate");
    if (rate !== undefined) this.rate = Number(rate) || 0;
    const target = meta.get("target");
    if (target !== undefined) this.toldTarget = JSON.parse(target) as TargetJson | null;
  }

  /** Deleted with everything else (idle expiry). */
  reset(): void {
    this.rate = 0;
    this.toldTarget = undefined;
    this.targetCache = undefined;
    this.rearmedAt = 0;
    this.points = [];
  }

  /** The fast-loop points since the last call (the sweep's visit takes them), oldest first. */
  takePoints(): SeriesPoint[] {
    const taken = this.points;
    this.points = [];
    return taken;
  }

  /** The rate the fast loop holds, whether or not the channel has a target (answers use {@link currentRate}). */
  get fastRate(): number {
    return this.rate;
  }

  /**
   * One fast-loop period ends, when it is due: the rate the next answers carry, and the next period's
   * alarm unless the loop stops.
   */
  tick(now: number): void {
    if (this.store.wiped) return;
    const due = this.store.counter("fast_due_at");
    if (!due) return;
    if (now < due) {
      this.scheduler.request(due); // woken early for another job
      return;
    }
    const target = this.target();
    const counts = {
      delivered: this.store.counter("fast_delivered"),
      dropped: this.store.counter("fast_dropped"),
      priority: this.store.counter("fast_priority"),
      elapsedMs: Math.max(0, now - this.store.counter("fast_started_at")),
      occupancy: target ? this.occupancy() : 0,
    };
    const step = fastLoopStep(counts, this.rate, target, settingsOf(this.env).samplerFastPeriodMs, now);
    this.setRate(step.rate);
    if (target) {
      this.points.push(fastLoopPoint(now, counts, target, step.rate));
      if (this.points.length > FAST_POINTS_HELD) this.points.shift();
    }
    if (!target) {
      this.store.set({ fast_due_at: 0, fast_delivered: 0, fast_dropped: 0, fast_priority: 0 });
      return;
    }
    this.store.set({
      fast_delivered: 0,
      fast_dropped: 0,
      fast_priority: 0,
      fast_started_at: now,
      fast_due_at: step.dueAt,
      fast_decided_at: now,
    });
    if (step.dueAt) this.scheduler.request(step.dueAt);
  }

  /** Starts the fast loop's first period at `now` when a channel with a target is not running it yet. */
  start(now: number): void {
    if (!this.target()) return;
    const period = settingsOf(this.env).samplerFastPeriodMs;
    const running = this.store.counter("fast_due_at");
    let wake: number;
    if (running) {
      // Running, unless its alarm is a whole period overdue (lost): then wake it now, once a period.
      if (now < running + period || now - this.rearmedAt < period) return;
      this.rearmedAt = now;
      wake = now;
    } else {
      wake = now + period;
      this.store.set({ fast_delivered: 0, fast_dropped: 0, fast_priority: 0, fast_started_at: now, fast_due_at: wake });
    }
    // A failure never fails the publish that started the loop: a lost alarm is re-armed (above).
    this.scheduler.request(wake);
  }

  /** The rate answers carry: the fast loop's, or null for a channel without one. */
  currentRate(): ChannelRate {
    return this.target() ? this.rate : null;
  }

  setRate(rate: number): void {
    if (rate === this.rate) return;
    this.rate = rate;
    this.store.putMeta("fast_rate", String(rate));
  }

  /**
   * The channel's target as the sampler or the admin API resolved it (a runtime target included);
   * null: none. Until told, the object uses `THROTTLE_TARGET(S)`.
   */
  setTarget(target: TargetJson | null): void {
    if (JSON.stringify(target) === JSON.stringify(this.toldTarget)) return;
    this.toldTarget = target;
    this.targetCache = undefined;
    // Kept in memory only while nothing is stored; written with the channel's next write otherwise.
    if (!this.store.wiped) this.store.putMeta("target", JSON.stringify(target));
  }

  /**
   * The target the fast loop holds. The sampler and the admin API tell the object the target they
   * resolved (src/settings/rules.ts `targetFor`, a runtime target included; null: none); until told,
   * the object resolves it from the settings by the same rule.
   */
  target(): Target | null {
    if (this.targetCache !== undefined) return this.targetCache;
    const channel = this.store.channel;
    if (!channel) return null; // not known yet: decide once it is
    const settings = settingsOf(this.env);
    let name: ChannelName | null = null;
    try {
      name = channelOfKey(channel);
    } catch {
      // a name that is not a channel: no fast loop
    }
    this.targetCache = name === null || this.toldTarget === null ? null : targetFor(settings, name, this.toldTarget);
    return this.targetCache;
  }
}
