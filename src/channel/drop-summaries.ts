/**
 * A channel's summaries of what the throttle dropped (docs/api.md, "Summaries of drops"): on a
 * channel with a `THROTTLE_SUMMARY` rule, the drops the channel counts are summed per key over one
 * `SUMMARY_INTERVAL`, and when the interval ends with drops in it every subscriber gets one summary
 * frame, a side frame through the relays (src/channel/relays.ts, `sendSide`): no seq, never in
 * history, never replayed.
 *
 * The keys are decided where the drop is (the publish route, functions/drop-summary.ts) and reach
 * the channel with the drop counts they belong to, so a frame's counts add up to the drops the
 * channel counted in [from, to). An interval opens with the first drop counted after the last frame
 * and ends at the first alarm at least `SUMMARY_INTERVAL` later (`to` is that alarm's time); an
 * interval with no drops never opens, so it sends nothing.
 *
 * Kept in memory only, bounded in keys (functions/drop-summary.ts, `SUMMARY_MAX_KEYS`): a summary is a
 * periodic report the next one supersedes, so a restart of the object loses at most the open
 * interval's frame, and nothing about summaries is ever stored.
 */
import { KeyTally, OTHER_KEY, summaryFrame } from "../../functions/drop-summary";
import { SUMMARY_REPORT_MS } from "../active-channels/active-channels";
import type { AlarmScheduler } from "../platform/alarm-scheduler";
import { activeChannelsStub } from "../platform/stubs";
import { summaryFor } from "../settings/rules";
import { type SummaryRule, settingsOf } from "../settings/settings";
import { parseChannelName } from "../wire/channel-names";
import type { SideFrame } from "../wire/frame-text";
import type { ChannelStore } from "./store";

interface OpenInterval {
  from: number;
  due: number;
  tally: KeyTally;
}

export class DropSummaries {
  /** The interval being summed: when it opened and is due to end (epoch ms), its counts; null: none is open. */
  private open: OpenInterval | null = null;
  /** The channel's summary rule; undefined until computed (config is per isolate, fixed for the object's life). */
  private ruleCache: SummaryRule | null | undefined = undefined;
  /** The last summary sent (JSON text), for stats; null: none since the object started. */
  last: string | null = null;
  /** When a summary was last reported to the sampler's registry for the dashboard (epoch ms). */
  private reportedAt = 0;

  /** @param send side frames to every relay of the channel (src/channel/relays.ts). */
  constructor(
    private readonly store: ChannelStore,
    private readonly scheduler: AlarmScheduler,
    private readonly env: Env,
    private readonly send: (frames: SideFrame[]) => void,
  ) {}

  /** Deleted with everything else (idle expiry). */
  reset(): void {
    this.open = null;
    this.ruleCache = undefined;
    this.last = null;
    this.reportedAt = 0;
  }

  /**
   * Counts `dropped` drops the channel has just counted: `byKey` holds the keys of some or all of
   * them (from the isolate that decided them); the rest count under `"(other)"`.
   */
  count(dropped: number, byKey?: Readonly<Record<string, number>> | null): void {
    if (!(dropped > 0) || !this.rule()) return;
    const open = this.openAt(Date.now());
    let keyed = 0;
    for (const [key, given] of Object.entries(byKey ?? {})) {
      // Never more keyed than dropped, whatever arrives: the counts must add up to the drops.
      const n = Math.min(Math.floor(given), dropped - keyed);
      if (!(n > 0)) continue;
      open.tally.add(key, n);
      keyed += n;
    }
    open.tally.add(OTHER_KEY, dropped - keyed);
  }

  /** Counts one drop with its key (a drop decided inside the channel's batch). */
  countOne(key: string | undefined): void {
    this.count(1, key === undefined ? null : { [key]: 1 });
  }

  /** The alarm: ends the open interval once it is due, sending its frame (it has drops, or it would not be open). */
  tick(now: number): void {
    const open = this.open;
    if (!open) return;
    if (now < open.due) {
      this.scheduler.request(open.due); // woken early for another job
      return;
    }
    this.open = null;
    const channel = this.store.channel;
    if (!channel || this.store.wiped || open.tally.total === 0) return;
    const text = summaryFrame(channel, open.from, now, open.tally);
    this.last = text;
    this.send([{ event: "summary", text }]);
    this.report(channel, text, now);
  }

  /**
   * The dashboard's card shows a channel's latest summary from the sampler's registry (its overview
   * calls no channel object): reported at most once per {@link SUMMARY_REPORT_MS}, best effort.
   */
  private report(channel: string, text: string, now: number): void {
    if (now - this.reportedAt < SUMMARY_REPORT_MS) return;
    this.reportedAt = now;
    activeChannelsStub(this.env)
      .noteSummary(channel, text, now)
      .catch((e: unknown) => {
        this.reportedAt = 0; // the next summary tries again
        console.error("floodgate: could not report a summary to the dashboard", e instanceof Error ? e.message : e);
      });
  }

  private openAt(now: number): OpenInterval {
    if (this.open) return this.open;
    const due = now + settingsOf(this.env).summaryIntervalMs;
    this.open = { from: now, due, tally: new KeyTally() };
    this.scheduler.request(due);
    return this.open;
  }

  private rule(): SummaryRule | null {
    if (this.ruleCache !== undefined) return this.ruleCache;
    const channel = this.store.channel;
    if (!channel) return null; // not known yet: decide once it is
    try {
      this.ruleCache = summaryFor(settingsOf(this.env), parseChannelName(channel));
    } catch {
      this.ruleCache = null; // bad config, or a name that is not a channel: no summaries
    }
    return this.ruleCache;
  }
}
