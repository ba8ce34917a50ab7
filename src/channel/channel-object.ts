/**
 * ChannelObject — one Durable Object per channel (SQLite storage). It owns the channel's order:
 * assigns sequence numbers, keeps the last `HISTORY_LIMIT` messages for history and resume, remembers
 * `Idempotency-Key`s for 10 minutes, and counts delivered and dropped messages per sampling period for
 * the sampler.
 *
 * The class only routes each RPC to the part that does one job:
 * - src/channel/store.ts: tables, counters, the batch transaction, the "nothing stored" state;
 * - src/channel/messages.ts: appending, trimming and reading the history;
 * - src/channel/publishing.ts: one publish and its Idempotency-Key, and the keys' expiry;
 * - src/channel/drop-summaries.ts: summaries of the drops per `SUMMARY_INTERVAL`, sent to every
 *   subscriber (docs/api.md, "Summaries of drops");
 * - src/channel/idle-expiry.ts: deleting everything once the channel is idle (docs/operations.md,
 *   "Storage bounded by activity");
 * - src/channel/record.ts: the analytics channel as the record of dropped messages;
 * - src/channel/relays.ts: its relays, which hold its subscribers (docs/api.md "Relays"), and
 *   the fan-out to them;
 * - src/channel/activity.ts, channel-fast-loop.ts, channel-sampling.ts: traffic counts and
 *   reports, the throttle's fast loop (docs/throttling.md, "Two loops"), and the sampler's calls.
 *
 * Every deadline (Idempotency-Key expiry, the record's retention, idle expiry, the fast loop, relay
 * wake-ups) shares the object's single alarm through one AlarmScheduler (src/platform/alarm-scheduler.ts).
 *
 * The Worker talks to it by RPC (publish, history, stats, relay assignment, …); relays call it to
 * report their counts and to fetch what they missed from its history.
 */
import { DurableObject } from "cloudflare:workers";
import { splitShardKey } from "../../functions/shard-key";
import { AlarmScheduler } from "../platform/alarm-scheduler";
import type { ChannelForRelay, RelayReport, RelayReportAnswer } from "../relay/calls";
import type { TargetJson } from "../settings/targets";
import type { LiveFrame } from "../wire/frame-text";
import { resumePoint } from "../wire/subscribe-params";
import { ChannelActivity } from "./activity";
import type {
  ChannelPeriod,
  ChannelRate,
  ChannelStats,
  CopyItem,
  PublishCommand,
  PublishManyResult,
  PublishOutcome,
  RecordCounts,
  RelayAssignment,
  RelaySlot,
} from "./calls";
import type { Admission } from "./client-cap";
import { DropSummaries } from "./drop-summaries";
import { ChannelFastLoop } from "./fast-loop";
import { IdleExpiry } from "./idle-expiry";
import { MessageLog } from "./messages";
import type { PresenceAnswer, PresenceSettings } from "./presence";
import { Publishing } from "./publishing";
import { ChannelRecord } from "./record";
import { ChannelRelays } from "./relays";
import { ChannelSampling } from "./sampling";
import { ShardMembership, ShardRegistry } from "./shard-registry";
import { channelStats } from "./stats";
import { ChannelStore } from "./store";

export class ChannelObject extends DurableObject<Env> implements ChannelForRelay {
  private readonly scheduler: AlarmScheduler;
  private readonly store: ChannelStore;
  private readonly record: ChannelRecord;
  private readonly messages: MessageLog;
  private readonly publishing: Publishing;
  private readonly relays: ChannelRelays;
  private readonly expiry: IdleExpiry;
  private readonly fastLoop: ChannelFastLoop;
  private readonly activity: ChannelActivity;
  private readonly sampling: ChannelSampling;
  private readonly summaries: DropSummaries;
  private readonly shards: ShardRegistry;
  private readonly membership: ShardMembership;

  constructor(ctx: DurableObjectState, env: Env) {
    super(ctx, env);
    const scheduler = new AlarmScheduler(ctx.storage, "the channel's alarm");
    const store = new ChannelStore(ctx.storage, scheduler, (fn) => ctx.blockConcurrencyWhile(fn));
    const record = new ChannelRecord(store, scheduler, env);
    const occupancy = () => this.relays.occupancy();
    const fastLoop = new ChannelFastLoop(store, scheduler, env, occupancy);
    const activity = new ChannelActivity(store, fastLoop, env);
    const count = activity.count.bind(activity);
    const messages = new MessageLog(store, env, count, () => record.isRecord());
    const expiry = new IdleExpiry(store, scheduler, env, {
      isRecord: () => record.isRecord(),
      occupancy,
      subscribed: () => {
        const { websockets, sse } = this.relays.totals(Date.now());
        return websockets + sse;
      },
      probeRelays: (now) => this.relays.probe(now, true),
      forget: () => {
        this.membership.left();
        this.relays.forget();
        activity.reset();
        fastLoop.reset();
        this.sampling.reset();
        this.summaries.reset();
      },
    });
    this.scheduler = scheduler;
    this.store = store;
    this.record = record;
    this.fastLoop = fastLoop;
    this.activity = activity;
    this.messages = messages;
    this.expiry = expiry;
    this.publishing = new Publishing(store, messages, scheduler, count);
    this.relays = new ChannelRelays(store, scheduler, env, () => expiry.subscriberLeft());
    this.summaries = new DropSummaries(store, scheduler, env, (frames) => this.relays.sendSide(frames));
    this.sampling = new ChannelSampling(store, fastLoop, activity, occupancy, () => expiry.ensure());
    this.shards = new ShardRegistry(store);
    this.membership = new ShardMembership(env);
    ctx.blockConcurrencyWhile(async () => {
      await scheduler.load();
      const meta = store.load();
      record.load(meta);
      fastLoop.load(meta);
      this.sampling.load(meta);
      this.relays.load();
    });
  }

  // ---- publishing ------------------------------------------------------------------------------

  /**
   * Delivers or records the drop of each message, honouring its Idempotency-Key: the publishes that
   * reached one Worker isolate together (src/worker/publish-batcher.ts), decided in order in one transaction —
   * one storage commit and one fan-out for all. Each gets exactly the outcome it would have had alone
   * (a key repeated inside the batch answers the first result again).
   */
  async publishMany(cmds: PublishCommand[]): Promise<PublishManyResult> {
    if (cmds[0]) await this.membership.join(cmds[0].channel);
    this.store.revive();
    const outcomes: PublishOutcome[] = [];
    let sends = 0;
    this.store.inBatch(() => {
      sends = this.relays.saveSends();
      for (const cmd of cmds) outcomes.push(this.publishing.applyOne(cmd));
      this.messages.trimHistory();
    });
    this.relays.sendsSaved(sends);
    // Once the batch committed: its drops count in the summary, each under the key its isolate gave.
    outcomes.forEach((o, i) => {
      if (o.status === "dropped" && !o.replayed) this.summaries.countOne(cmds[i]?.summaryKey);
    });
    const appended = outcomes.some((o) => o.status === "delivered" && !o.replayed);
    if (appended) this.relays.fanOut();
    // A message published straight to the analytics channel is kept for the retention too.
    if (appended && this.record.isRecord()) this.record.scheduleExpiry();
    this.publishing.scheduleKeyExpiry(cmds);
    this.expiry.ensure();
    await this.activity.settled(undefined);
    return { outcomes, drop_rate: this.fastLoop.currentRate() };
  }

  /**
   * Appends copies of dropped messages in one call and one transaction: this object is the analytics
   * channel (the record of dropped messages), so it keeps them for `ANALYTICS_RETENTION`, not
   * `HISTORY_LIMIT`, and makes sure its alarm will expire them. Answers how many it appended: a copy
   * it keeps already (the same id, delivered again by the queue) is not appended twice.
   */
  appendCopies(channel: string, items: CopyItem[], now: number): number {
    this.store.revive();
    this.store.remember(channel);
    this.record.becomeRecord();
    let appended = 0;
    let sends = 0;
    this.store.inBatch(() => {
      sends = this.relays.saveSends();
      // At most once by id, whatever the queue's redeliveries (src/channel/record.ts).
      const kept = this.record.held(items.map((item) => item.id));
      for (const item of items) {
        if (kept.has(item.id)) continue;
        kept.add(item.id); // a batch that carries a copy twice appends it once
        this.messages.append(item.data, item.publisher, now, item);
        appended++;
      }
      this.store.bump({ copies_total: appended });
      if (appended > 0) this.store.set({ last_publish_at: now });
    });
    this.relays.sendsSaved(sends);
    this.relays.fanOut();
    this.record.scheduleExpiry();
    return appended;
  }

  /**
   * Counts drops decided in the Worker (no Idempotency-Key), and analytics copies that failed; `byKey`
   * holds the drops' summary keys on a channel with a summary rule. Answers the current rate: at a
   * high drop rate few publishes reach this object, but every isolate that drops reports here, so
   * each one still hears the rate.
   */
  async recordDrops(
    channel: string,
    dropped: number,
    copyFailures: number,
    byKey?: Record<string, number>,
  ): Promise<ChannelRate> {
    await this.membership.join(channel);
    this.store.revive();
    this.store.remember(channel);
    if (dropped > 0) this.store.set({ last_publish_at: Date.now() });
    this.activity.count({ dropped_total: dropped, period_dropped: dropped, copy_failures_total: copyFailures });
    this.summaries.count(dropped, byKey);
    this.expiry.ensure();
    await this.activity.settled(undefined);
    return this.fastLoop.currentRate();
  }

  // ---- reads -----------------------------------------------------------------------------------

  /** Retained messages as JSON frames (src/channel/messages.ts). */
  history(after: number | null, limit: number, sourceChannel: string | null = null): string[] {
    return this.messages.history(after, limit, sourceChannel);
  }

  /** A resuming reader's page, or the head its `after` is beyond (src/channel/messages.ts). */
  historyPage(after: number | null, limit: number, source: string | null, epoch: string | null) {
    return this.messages.page(after, limit, source, epoch);
  }

  /**
   * Occupancy now, and in a small room who (src/channel/presence.ts). A read: a channel
   * nobody uses stores nothing for it.
   */
  presence(channel: string): PresenceAnswer {
    // Named by the caller (an object that never stored its name still answers): a shard's key names
    // its channel and its shard (functions/shard-key.ts).
    const { channel: name, shard } = splitShardKey(channel);
    return { ...this.relays.presenceNow(), channel: name, ...(shard === null ? {} : { shard }) };
  }

  /**
   * A Pusher channel's counts for the HTTP API (docs/api.md, "The Pusher door"): its subscribers
   * through either door, its presence members, and (`users`) up to that many members' ids. A read:
   * a channel nobody uses stores nothing for it.
   */
  pusherCounts(users = 0): { subscriptions: number; members: number; ids: string[] } {
    const { websockets, sse } = this.relays.totals(Date.now());
    const audience = this.relays.pusher;
    return { subscriptions: websockets + sse, members: audience.memberCount, ids: audience.memberIds(users) };
  }

  stats(): ChannelStats {
    return channelStats(this.store, this.relays, this.record, this.sampling.lastSample, this.summaries.last);
  }

  /** The analytics channel's copies: appended, kept and expired (all zero on any other channel). */
  recordCounts(): RecordCounts {
    return this.record.counts();
  }

  // ---- shards (src/channel/shard-registry.ts) --------------------------------------------------

  /** This channel's registry lists `shard` (false: it lists as many as it keeps, and not this one). */
  registerShard(channel: string, shard: string, now: number): boolean {
    const listed = this.shards.register(channel, shard, now);
    this.expiry.ensure();
    return listed;
  }

  /** The shards this channel's registry lists, by name. */
  shardNames(): string[] {
    return this.shards.names();
  }

  /** Shards that are gone leave the registry. */
  forgetShards(names: string[]): void {
    this.shards.forget(names);
  }

  /**
   * A broadcast's part in this shard: delivered like any publish if the shard has subscribers or
   * history, else `absent` (nothing stored, nothing created).
   */
  async broadcastOne(cmd: PublishCommand): Promise<PublishOutcome | { status: "absent" }> {
    if (this.store.wiped || (this.store.counter("last_seq") === 0 && this.relays.occupancy() === 0)) {
      return { status: "absent" };
    }
    const { outcomes } = await this.publishMany([{ ...cmd, action: "deliver" }]);
    return outcomes[0] ?? { status: "absent" };
  }

  // ---- the sampler -----------------------------------------------------------------------------

  /** This period's counts, and a new period (src/channel/sampling.ts). */
  takePeriod(now: number, target?: TargetJson | null): ChannelPeriod {
    return this.sampling.takePeriod(now, target);
  }

  /** The sampler's latest decision (src/channel/sampling.ts). */
  recordSample(sample: { sampled_at: number; new_rate: number; decided_by?: "fast loop" | "sweep" }): Promise<void> {
    return this.sampling.recordSample(sample);
  }

  /** The channel's target as the sampler or the admin API resolved it (src/channel/fast-loop.ts). */
  setTarget(target: TargetJson | null): void {
    this.fastLoop.setTarget(target);
  }

  // ---- alarm -------------------------------------------------------------------------------------

  /**
   * The object's single alarm, shared by every job that needs one: each does what is due at `now`
   * and asks the scheduler for its next time; the earliest wins.
   */
  override async alarm(): Promise<void> {
    this.scheduler.fired();
    const now = Date.now();
    if (await this.expiry.expire(now)) return;
    this.publishing.expireKeys(now);
    this.record.expireCopies(now);
    this.fastLoop.tick(now);
    this.summaries.tick(now);
    this.relays.presenceTick(now);
  }

  // ---- relays -------------------------------------------------------------------------------------

  /**
   * A slot for one subscriber of `client` on a relay of its placement group (src/channel/relay-registry.ts),
   * or why not (the client's cap, its /48's, `MAX_SUBSCRIBERS`, the anonymous share: `limits`). The
   * Worker passes the capacities (and presence's settings) from its configuration.
   */
  async assignRelay(
    channel: string,
    group: string,
    capacity: number,
    client: string,
    limits: Admission,
    presence?: PresenceSettings,
    resume?: { after: number; epoch: string | null },
  ): Promise<RelayAssignment> {
    await this.arrive(channel);
    // A resume past the head in the current numbering takes no slot: the Worker answers it 400.
    const head = this.store.counter("last_seq");
    if (resume && resumePoint(resume.after, resume.epoch, { epoch: this.store.epoch, head }) === "beyond") {
      return { beyond: true, head };
    }
    return this.relays.assign(group, capacity, client, limits, presence);
  }

  /**
   * A slot for one Pusher subscription on the connection host `host` (src/connection-host/), which is
   * a relay to this channel: the same refusals as {@link assignRelay}.
   */
  async assignHost(
    channel: string,
    host: string,
    group: string,
    k: number,
    client: string,
    limits: Admission,
    presence?: PresenceSettings,
  ): Promise<RelaySlot> {
    await this.arrive(channel);
    return this.relays.assignHost(host, group, k, client, limits, presence);
  }

  /**
   * A subscriber arriving by either door: a shard is listed by its channel (or refused), a store
   * deleted as idle is made again, the name is kept, and idle expiry watches the channel.
   */
  private async arrive(channel: string): Promise<void> {
    await this.membership.join(channel);
    this.store.revive();
    this.store.remember(channel);
    this.expiry.ensure();
  }

  /** A relay's counts after a change (src/channel/relays.ts). */
  relayReport(channel: string, report: RelayReport): RelayReportAnswer {
    const empty = report.websockets + report.sse === 0;
    // A relay emptied after the channel deleted itself keeps it deleted.
    if (this.store.wiped && empty) return { leave: true, head: 0 };
    this.store.revive();
    this.store.remember(channel);
    const answer = this.relays.report(report);
    // Its last subscriber gone, with or without a slot still reserved on it: idle expiry takes over.
    if (empty) this.expiry.subscriberLeft();
    return answer;
  }

  /** Retained frames after `after` for a relay's repair or a joining subscriber's replay (src/channel/relays.ts). */
  framesAfter(after: number, upTo: number, maxBytes: number): { frames: LiveFrame[]; more: boolean } {
    return this.relays.framesAfter(after, upTo, maxBytes);
  }
}
