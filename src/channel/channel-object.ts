/**
 * ChannelObject — one Durable Object per channel (SQLite storage). It owns the channel's order:
 * assigns sequence numbers, keeps the last `HISTORY_LIMIT` messages for history and resume, remembers
 * `Idempotency-Key`s for 10 minutes, and counts delivered and dropped messages per sampling period for
 * the sampler.
 *
 * Its subscribers are not here: they are spread over relays (src/delivery/relay.ts, docs/api.md "Relays").
 * The channel keeps the registry of its relays (src/delivery/relay-registry.ts: which relay a new subscriber
 * goes to, how full each is) and sends each batch once per relay, concurrently, each on its own
 * ordered line (src/delivery/relay-pipe.ts) that the publish never waits for.
 *
 * The analytics channel's object is the record of dropped messages (docs/operations.md): it keeps
 * every copy for `ANALYTICS_RETENTION` instead of `HISTORY_LIMIT`, indexed by source channel and by
 * drop time for history filters and exports, and its alarm deletes expired copies in batches.
 *
 * Its storage is bounded by activity (docs/operations.md, "Storage bounded by activity"): the
 * object's single alarm expires Idempotency-Keys without waiting for traffic, and deletes everything
 * once nobody has published for `HISTORY_TTL` and nobody is subscribed.
 *
 * A channel with a target also runs the throttle's fast loop here (docs/throttling.md, "Two loops"):
 * while it is busy or throttled, an alarm every `SAMPLER_FAST_PERIOD` applies the sampler's law
 * (functions/sampler.ts) to the last period, and every answer to a publish or a drop report carries
 * the resulting rate back to the Worker isolate that sent it.
 *
 * The Worker talks to it by RPC (publish, history, stats, relay assignment, …); relays call it to
 * report their counts and to fetch what they missed from its history.
 */
import { DurableObject } from "cloudflare:workers";
import { nextDropRate, type PeriodCounts, roundRate } from "../../functions/sampler";
import { relayName } from "../delivery/placement";
import { RelayPipe } from "../delivery/relay-pipe";
import { type RelayEntry, RelayRegistry, type RelayReport } from "../delivery/relay-registry";
import { PAGE_MAX_BYTES, SUBSCRIBER_MAX_BEHIND_BYTES } from "../delivery/subscriber-bounds";
import { getConfig, parseTarget, type Target, type TargetJson, targetFor } from "../platform/config";
import { activeChannelsStub, relayStub } from "../platform/stubs";
import { frame, type LiveFrame, type MessageFields, takeFrameBytes } from "./frames";
import { parseChannelName } from "./names";

/** How long an Idempotency-Key is remembered (docs/api.md, POST /v1/publish). */
export const IDEMPOTENCY_TTL_MS = 10 * 60 * 1000;
/** Idempotency-Key expiry waits at least this long after an alarm, so steady keyed traffic does not make it fire for every key. */
const ALARM_SLACK_MS = 60_000;
/** How long past its time a cached alarm may be before {@link ChannelObject.scheduleAlarm} sets it again. */
const ALARM_LOST_MS = 60_000;
/** How soon after a fan-out the channel wakes to re-send the head, in case it was reset meanwhile. */
const RELAY_WAKE_MS = 10_000;
/** Least time between two wake-ups of every relay to refresh their counts (see probeRelays). */
const RELAY_PROBE_MS = 5_000;
/** Expired copies deleted per statement, and at most per alarm run before the object yields. */
export const EXPIRE_BATCH = 1000;
export const EXPIRE_PER_RUN = 20_000;

/** What the Worker asks the channel to do with one publish. */
export interface PublishCommand {
  channel: string;
  /** The message as minified JSON text. */
  data: string;
  publisher: string;
  /** The throttle's decision, made in the Worker. */
  action: "deliver" | "drop";
  idempotencyKey?: string;
  now: number;
}

/**
 * The channel's current drop rate from its fast loop, carried to the isolate in every answer; null
 * when the channel has no target (KV's rate rules).
 */
export type ChannelRate = number | null;

/** What {@link ChannelObject.publishMany} answers: one outcome per command, and the current rate. */
export interface PublishManyResult {
  outcomes: PublishOutcome[];
  drop_rate: ChannelRate;
}

export type PublishOutcome =
  | { status: "delivered"; channel: string; seq: number; id: string; published_at: number; replayed: boolean }
  | { status: "dropped"; replayed: boolean };

/** One copy of a dropped message for the analytics channel (its JSON text and what it is indexed by). */
export interface CopyItem {
  /** The copy's message id, made when the message was dropped (a failure log names the same id). */
  id: string;
  data: string;
  publisher: string;
  source_channel: string;
  dropped_at: number;
}

/** Where an export page ends: the next page starts after this (drop time, seq). */
export interface ExportCursor {
  dropped_at: number;
  seq: number;
}

/** The analytics channel's reconciliation counts (stats and /metrics). */
export interface RecordCounts {
  /** Copies ever appended. */
  copies_total: number;
  /** Copies retained now (appended minus expired). */
  copies_kept: number;
  /** Copies deleted by `ANALYTICS_RETENTION`. */
  copies_expired_total: number;
  /** `dropped_at` of the oldest message retained, or null when none is. */
  oldest_dropped_at: number | null;
}

/**
 * One sampling period, handed to the sampler and then reset: the law's own counts
 * (functions/sampler.ts; `occupancy` totals every relay) and what the sweep needs beside them.
 */
export interface ChannelPeriod {
  channel: string | null;
  counts: PeriodCounts;
  /** When the period began (epoch ms). */
  startedAt: number;
  /** The fast loop's current rate, or null when the channel has no fast loop. */
  fastRate: ChannelRate;
  /** When the fast loop last decided (epoch ms), or null when it never has. */
  fastDecidedAt: number | null;
}

/** What a relay's report is answered: whether to leave (it is empty), and the channel's head seq. */
export interface RelayReportAnswer {
  leave: boolean;
  head: number;
}

/** A slot on a relay for one subscriber, with the channel's head seq when it was taken. */
export type RelayAssignment =
  | { relay: string; group: string; k: number; reservation: string; head: number }
  | { full: true };

export interface ChannelStats {
  channel: string | null;
  /** Subscribers of every relay together. */
  occupancy: number;
  websockets: number;
  sse: number;
  /** Relays serving the channel. */
  relays: number;
  /** Delivery calls made from the channel to its relays (each carries one batch, or the head only). */
  relay_sends_total: number;
  last_seq: number;
  delivered_total: number;
  dropped_total: number;
  analytics_copy_failures_total: number;
  /** Subscribers disconnected for falling too far behind (WebSocket and SSE). */
  slow_consumers_closed: number;
  last_sample: unknown;
  /** Set on the analytics channel only. */
  record: RecordCounts | null;
}

type CounterName =
  | "next_seq"
  | "delivered_total"
  | "dropped_total"
  | "copy_failures_total"
  /** Subscribers (WebSocket or SSE) disconnected for falling too far behind, as relays report them. */
  | "slow_consumers_closed"
  /** Delivery calls made to relays. */
  | "relay_sends_total"
  | "period_delivered"
  | "period_dropped"
  | "period_started_at"
  /** When the channel last took a publish (delivered or dropped), or was first used: idle expiry counts from it. */
  | "last_publish_at"
  /** The traffic weight last reported to the sampler's registry this period (0: not yet reported). */
  | "period_marked"
  /** The analytics channel: copies appended, and copies deleted by retention. */
  | "copies_total"
  | "copies_expired_total"
  /** The fast loop's period: counts, start, when its alarm is due (0: not running), last decision. */
  | "fast_delivered"
  | "fast_dropped"
  | "fast_started_at"
  | "fast_due_at"
  | "fast_decided_at";

export class ChannelObject extends DurableObject<Env> {
  private readonly sql: SqlStorage;
  private readonly counters = new Map<CounterName, number>();
  /** The channel's relays; active ones are stored in the `relays` table. */
  private readonly relays = new RelayRegistry(
    {
      save: (e) => this.saveRelay(e),
      remove: (name) => {
        if (!this.wiped) this.sql.exec("DELETE FROM relays WHERE name = ?", name);
      },
    },
    (group, k) => relayName(this.channel ?? "", group, k),
  );
  /** The delivery line to each active relay (memory only: a new instance starts new lines). */
  private readonly pipes = new Map<string, RelayPipe>();
  /** When every relay was last woken to refresh its counts (see probeRelays). */
  private lastProbe = 0;
  private channel: string | null = null;
  private lastSample: unknown = null;
  /** An activity report to the sampler's registry in flight (once per period). */
  private marking: Promise<void> | null = null;
  /** When the object's alarm is set for, as this instance set or read it; null when none is set. */
  private alarmAt: number | null = null;
  /** Nothing is stored (never written, or deleted by {@link expireIdle}); the tables come with the next write. */
  private wiped = false;
  /** The fast loop's current drop rate (stored in `meta` as `fast_rate`). */
  private fastRate = 0;
  /** The target the sampler or the admin API last gave this channel; undefined: never told. */
  private toldTarget: TargetJson | null | undefined = undefined;

  constructor(ctx: DurableObjectState, env: Env) {
    super(ctx, env);
    this.sql = ctx.storage.sql;
    ctx.blockConcurrencyWhile(async () => {
      this.alarmAt = await ctx.storage.getAlarm();
      // A channel never written to (a history read or stats of a name nobody used) creates nothing:
      // its tables come with its first write.
      const stored = this.sql
        .exec<{ n: number }>("SELECT COUNT(*) AS n FROM sqlite_master WHERE type = 'table' AND name = 'counters'")
        .one().n;
      if (stored === 0) {
        this.wiped = true;
        return;
      }
      this.createTables();
      for (const row of this.sql.exec<{ name: string; value: number }>("SELECT name, value FROM counters")) {
        this.counters.set(row.name as CounterName, row.value);
      }
      for (const row of this.sql.exec<{ name: string; value: string }>("SELECT name, value FROM meta")) {
        if (row.name === "channel") this.channel = row.value;
        if (row.name === "last_sample") this.lastSample = JSON.parse(row.value);
        if (row.name === "record") this.recordRole = true;
        if (row.name === "fast_rate") this.fastRate = Number(row.value) || 0;
        if (row.name === "target") this.toldTarget = JSON.parse(row.value) as TargetJson | null;
      }
      this.relays.load(
        this.sql
          .exec<RelayRow>("SELECT name, grp, k, websockets, sse FROM relays")
          .toArray()
          .map((r) => ({ ...r, group: r.grp })),
      );
      // A new instance (restart, eviction) does not know what its relays got: a batch that was on its
      // way when the old one went is lost on the line, so each relay hears the head and repairs. A
      // publish arriving first does the same with its own call, and then no extra call is made.
      if (this.relays.size > 0) setTimeout(() => this.syncRelays(), 0);
    });
  }

  private createTables(): void {
    this.sql.exec(`CREATE TABLE IF NOT EXISTS messages (
        seq INTEGER PRIMARY KEY, id TEXT NOT NULL, data TEXT NOT NULL, publisher TEXT NOT NULL,
        published_at INTEGER NOT NULL)`);
    this.addRecordColumns();
    this.sql.exec(`CREATE TABLE IF NOT EXISTS idempotency (
        key TEXT PRIMARY KEY, result TEXT NOT NULL, expires_at INTEGER NOT NULL)`);
    this.sql.exec("CREATE INDEX IF NOT EXISTS idempotency_expiry ON idempotency (expires_at)");
    this.sql.exec("CREATE TABLE IF NOT EXISTS counters (name TEXT PRIMARY KEY, value INTEGER NOT NULL)");
    this.sql.exec("CREATE TABLE IF NOT EXISTS meta (name TEXT PRIMARY KEY, value TEXT NOT NULL)");
    this.sql.exec(`CREATE TABLE IF NOT EXISTS relays (
        name TEXT PRIMARY KEY, grp TEXT NOT NULL, k INTEGER NOT NULL, websockets INTEGER NOT NULL, sse INTEGER NOT NULL)`);
  }

  /** Before any use of storage: the tables, if an idle expiry deleted them. */
  private revive(): void {
    if (!this.wiped) return;
    this.wiped = false;
    this.createTables();
  }

  // ---- RPC -------------------------------------------------------------------------------------

  /**
   * Delivers or records the drop of each message, honouring its Idempotency-Key: the publishes that
   * reached one Worker isolate together (src/channel/publish-batcher.ts), decided in order in one transaction —
   * one storage commit and one fan-out for all. Each gets exactly the outcome it would have had alone
   * (a key repeated inside the batch answers the first result again).
   */
  async publishMany(cmds: PublishCommand[]): Promise<PublishManyResult> {
    this.revive();
    const outcomes: PublishOutcome[] = [];
    let sends = 0;
    this.inBatch(() => {
      sends = this.saveRelaySends();
      for (const cmd of cmds) outcomes.push(this.applyOne(cmd));
      this.trimHistory(this.counter("next_seq"));
    });
    this.unsavedSends -= sends;
    const appended = outcomes.some((o) => o.status === "delivered" && !o.replayed);
    if (appended) this.fanOut();
    // A message published straight to the analytics channel is kept for the retention too.
    if (appended && this.isRecord()) this.scheduleExpiry();
    const keyed = cmds.filter((c) => c.idempotencyKey).map((c) => c.now);
    if (keyed.length > 0) this.scheduleAlarm(Math.min(...keyed) + IDEMPOTENCY_TTL_MS);
    this.ensureExpiry();
    await this.settled(undefined);
    return { outcomes, drop_rate: this.currentRate() };
  }

  private applyOne(cmd: PublishCommand): PublishOutcome {
    this.remember(cmd.channel);
    const idemKey = cmd.idempotencyKey ? `${cmd.publisher}\u0000${cmd.idempotencyKey}` : null;
    if (idemKey) {
      const prior = this.sql
        .exec<{ result: string }>("SELECT result FROM idempotency WHERE key = ? AND expires_at > ?", idemKey, cmd.now)
        .toArray()[0];
      if (prior) return { ...(JSON.parse(prior.result) as PublishOutcome), replayed: true };
    }
    let outcome: PublishOutcome;
    this.set({ last_publish_at: cmd.now });
    if (cmd.action === "drop") {
      this.bump({ dropped_total: 1, period_dropped: 1 });
      outcome = { status: "dropped", replayed: false };
    } else {
      const m = this.append(cmd.data, cmd.publisher, cmd.now);
      outcome = {
        status: "delivered",
        channel: cmd.channel,
        seq: m.seq,
        id: m.id,
        published_at: cmd.now,
        replayed: false,
      };
    }
    if (idemKey) {
      this.sql.exec("DELETE FROM idempotency WHERE expires_at <= ?", cmd.now);
      const { replayed: _, ...stored } = outcome;
      this.sql.exec(
        "INSERT OR REPLACE INTO idempotency (key, result, expires_at) VALUES (?, ?, ?)",
        idemKey,
        JSON.stringify(stored),
        cmd.now + IDEMPOTENCY_TTL_MS,
      );
    }
    return outcome;
  }

  /**
   * Appends copies of dropped messages in one call and one transaction: this object is the analytics
   * channel (the record of dropped messages), so it keeps them for `ANALYTICS_RETENTION`, not
   * `HISTORY_LIMIT`, and makes sure its alarm will expire them. Returns the last seq.
   */
  appendCopies(channel: string, items: CopyItem[], now: number): number {
    this.revive();
    this.remember(channel);
    this.becomeRecord();
    let last = this.counter("next_seq");
    let sends = 0;
    this.inBatch(() => {
      sends = this.saveRelaySends();
      for (const item of items) last = this.append(item.data, item.publisher, now, item).seq;
      this.bump({ copies_total: items.length });
      this.set({ last_publish_at: now });
    });
    this.unsavedSends -= sends;
    this.fanOut();
    this.scheduleExpiry();
    return last;
  }

  /**
   * Counts drops decided in the Worker (no Idempotency-Key), and analytics copies that failed. Answers
   * the current rate: at a high drop rate few publishes reach this object, but every isolate that
   * drops reports here, so each one still hears the rate.
   */
  async recordDrops(channel: string, dropped: number, copyFailures: number): Promise<ChannelRate> {
    this.revive();
    this.remember(channel);
    if (dropped > 0) this.set({ last_publish_at: Date.now() });
    this.bump({ dropped_total: dropped, period_dropped: dropped, copy_failures_total: copyFailures });
    this.ensureExpiry();
    await this.settled(undefined);
    return this.currentRate();
  }

  /**
   * Retained messages as JSON frames, oldest first: after `after`, or the newest `limit`; with
   * `sourceChannel`, only copies of that channel's drops (analytics channel; through its index). A
   * page stops early, after at least one message, once it holds {@link PAGE_MAX_BYTES}.
   */
  history(after: number | null, limit: number, sourceChannel: string | null = null): string[] {
    if (this.wiped) return [];
    const from = sourceChannel === null ? "messages" : "messages INDEXED BY messages_by_source";
    const where = [sourceChannel === null ? "" : "source_channel = ?", after === null ? "" : "seq > ?"].filter(Boolean);
    const args = [sourceChannel, after].filter((a) => a !== null);
    const order = after === null ? "DESC" : "ASC";
    const { rows } = takeBytes(
      this.sql.exec<MessageRow>(
        `SELECT * FROM ${from} ${where.length ? `WHERE ${where.join(" AND ")}` : ""} ORDER BY seq ${order} LIMIT ?`,
        ...args,
        limit,
      ),
    );
    if (after === null) rows.reverse();
    const channel = this.channel ?? "";
    return rows.map((r) => frame(channel, r));
  }

  /**
   * One page of the export: copies with `dropped_at` in [from, to) (of one source channel, if given)
   * after `cursor`, ordered by drop time then seq, one frame per line. Through an index either way;
   * at most `maxRows` copies and about {@link PAGE_MAX_BYTES}. `next` is null on the last page.
   */
  exportPage(
    from: number,
    to: number,
    sourceChannel: string | null,
    cursor: ExportCursor | null,
    maxRows: number,
  ): { ndjson: string; next: ExportCursor | null } {
    if (this.wiped) return { ndjson: "", next: null };
    const start = cursor ? Math.max(from, cursor.dropped_at) : from;
    const after = cursor ?? { dropped_at: start, seq: -1 };
    const { rows, cut } = takeBytes(
      sourceChannel === null
        ? this.sql.exec<MessageRow>(
            `SELECT * FROM messages INDEXED BY messages_by_drop_time
             WHERE dropped_at >= ? AND dropped_at < ? AND (dropped_at, seq) > (?, ?)
             ORDER BY dropped_at, seq LIMIT ?`,
            start,
            to,
            after.dropped_at,
            after.seq,
            maxRows + 1,
          )
        : this.sql.exec<MessageRow>(
            `SELECT * FROM messages INDEXED BY messages_by_source_time
             WHERE source_channel = ? AND dropped_at >= ? AND dropped_at < ? AND (dropped_at, seq) > (?, ?)
             ORDER BY dropped_at, seq LIMIT ?`,
            sourceChannel,
            start,
            to,
            after.dropped_at,
            after.seq,
            maxRows + 1,
          ),
    );
    // One row more than a page was asked for, to know whether another page follows.
    const more = cut || rows.length > maxRows;
    const page = rows.slice(0, maxRows);
    const channel = this.channel ?? "";
    const last = page[page.length - 1];
    return {
      ndjson: page.map((r) => `${frame(channel, r)}\n`).join(""),
      next: more && last ? { dropped_at: last.dropped_at as number, seq: last.seq } : null,
    };
  }

  stats(): ChannelStats {
    const { websockets, sse } = this.relays.totals(Date.now());
    return {
      channel: this.channel,
      occupancy: websockets + sse,
      websockets,
      sse,
      relays: this.relays.active().length,
      relay_sends_total: this.counter("relay_sends_total") + this.unsavedSends,
      last_seq: this.counter("next_seq"),
      delivered_total: this.counter("delivered_total"),
      dropped_total: this.counter("dropped_total"),
      analytics_copy_failures_total: this.counter("copy_failures_total"),
      slow_consumers_closed: this.counter("slow_consumers_closed"),
      last_sample: this.lastSample,
      record: this.isRecord() ? this.recordCounts() : null,
    };
  }

  /** The analytics channel's copies: appended, kept and expired (all zero on any other channel). */
  recordCounts(): RecordCounts {
    const total = this.counter("copies_total");
    const expired = this.counter("copies_expired_total");
    return {
      copies_total: total,
      copies_kept: total - expired,
      copies_expired_total: expired,
      oldest_dropped_at: this.oldestDroppedAt(),
    };
  }

  // ---- the record of dropped messages (analytics channel) ------------------------------------------

  /**
   * Retention of the analytics channel: deletes messages whose `dropped_at` is older than
   * `ANALYTICS_RETENTION`, {@link EXPIRE_BATCH} at a time through the drop-time index, at most
   * {@link EXPIRE_PER_RUN} per run so publishes get their turn; never on the publish path. Answers
   * when it must run next: at once when it stopped at its limit, else when the oldest message kept
   * expires.
   */
  private expireCopies(now: number): number | null {
    if (this.wiped || !this.isRecord()) return null;
    const retention = getConfig(this.env).analyticsRetentionMs;
    const cutoff = now - retention;
    for (let deleted = 0; deleted < EXPIRE_PER_RUN; ) {
      let n = 0;
      this.inBatch(() => {
        const gone = this.sql
          .exec<{ source_channel: string | null }>(
            `DELETE FROM messages WHERE seq IN (
               SELECT seq FROM messages INDEXED BY messages_by_drop_time WHERE dropped_at < ? ORDER BY dropped_at LIMIT ?)
             RETURNING source_channel`,
            cutoff,
            EXPIRE_BATCH,
          )
          .toArray();
        n = gone.length;
        // Messages published to the channel directly expire too, but only copies are counted.
        this.bump({ copies_expired_total: gone.filter((r) => r.source_channel !== null).length });
      });
      deleted += n;
      if (n < EXPIRE_BATCH) {
        const oldest = this.oldestDroppedAt();
        return oldest === null ? null : oldest + retention;
      }
    }
    return now;
  }

  /** Makes sure the alarm will expire the oldest message the analytics channel keeps. */
  private scheduleExpiry(): void {
    const oldest = this.oldestDroppedAt();
    if (oldest !== null) this.scheduleAlarm(oldest + getConfig(this.env).analyticsRetentionMs);
  }

  private oldestDroppedAt(): number | null {
    if (this.wiped) return null;
    const row = this.sql
      .exec<{ dropped_at: number }>(
        "SELECT dropped_at FROM messages INDEXED BY messages_by_drop_time WHERE dropped_at IS NOT NULL ORDER BY dropped_at LIMIT 1",
      )
      .toArray()[0];
    return row ? row.dropped_at : null;
  }

  /**
   * Returns this period's counts and starts a new period (the sampler calls this once per run). The
   * sampler passes the channel's effective target (a runtime one included), which the fast loop uses
   * from then on.
   */
  takePeriod(now: number, target?: TargetJson | null): ChannelPeriod {
    if (this.wiped) {
      // Nothing stored (never used, or expired as idle): a sampler visit must not bring it back.
      if (target !== undefined) this.setTarget(target);
      return {
        channel: this.channel,
        counts: { delivered: 0, dropped: 0, elapsedMs: 0, occupancy: this.occupancy() },
        startedAt: now,
        fastRate: this.currentRate(),
        fastDecidedAt: null,
      };
    }
    if (target !== undefined) this.setTarget(target);
    const started = this.counter("period_started_at") || now;
    const delivered = this.counter("period_delivered");
    const dropped = this.counter("period_dropped");
    this.set({ period_delivered: 0, period_dropped: 0, period_started_at: now, period_marked: 0 });
    this.ensureExpiry();
    return {
      channel: this.channel,
      counts: { delivered, dropped, elapsedMs: Math.max(0, now - started), occupancy: this.occupancy() },
      startedAt: started,
      fastRate: this.currentRate(),
      fastDecidedAt: this.counter("fast_decided_at") || null,
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
    if (this.wiped) return; // a visit to a channel with nothing stored leaves nothing stored
    this.lastSample = sample;
    this.sql.exec("INSERT OR REPLACE INTO meta (name, value) VALUES ('last_sample', ?)", JSON.stringify(sample));
    // Only a rate the sweep decided itself: when the fast loop decided, the sample's rate is the one
    // the channel runs at (the fast rate, or the stored one when the change was too small to write).
    if (
      this.fastTarget() &&
      sample.decided_by !== "fast loop" &&
      sample.sampled_at >= this.counter("fast_decided_at")
    ) {
      this.setFastRate(sample.new_rate);
      if (sample.new_rate > 0) this.startFastLoop(Date.now());
      await this.settled(undefined);
    }
    this.ensureExpiry();
  }

  /**
   * The channel's target as the sampler or the admin API resolved it (a runtime target included);
   * null: none. Until told, the object uses `THROTTLE_TARGET(S)`.
   */
  setTarget(target: TargetJson | null): void {
    if (JSON.stringify(target) === JSON.stringify(this.toldTarget)) return;
    this.toldTarget = target;
    this.fastTargetCache = undefined;
    // Kept in memory only while nothing is stored; written with the channel's next write otherwise.
    if (!this.wiped)
      this.sql.exec("INSERT OR REPLACE INTO meta (name, value) VALUES ('target', ?)", JSON.stringify(target));
  }

  // ---- alarm -------------------------------------------------------------------------------------

  /**
   * The object's single alarm, shared by every job that needs one: each job is a method that does
   * what is due at `now` and asks {@link scheduleAlarm} for its next time; the earliest wins.
   */
  override async alarm(): Promise<void> {
    this.alarmAt = null; // the alarm that fired is spent; each job below sets its next time
    const now = Date.now();
    if (await this.expireIdle(now)) return;
    this.expireIdempotencyKeys(now);
    const copiesDue = this.expireCopies(now);
    if (copiesDue !== null) this.scheduleAlarm(copiesDue);
    this.fastLoopTick(now);
  }

  /**
   * Sets the alarm for `at`, unless it is already set for an earlier time (an earlier alarm is never
   * pushed later, so no job's time is missed: a job woken early just schedules again).
   */
  private scheduleAlarm(at: number): void {
    // A cached time long past is an alarm that was lost (a runtime that fires an alarm clears the
    // cache first, in alarm()): set it again rather than trust it.
    const lost = this.alarmAt !== null && this.alarmAt < Date.now() - ALARM_LOST_MS;
    if (this.alarmAt !== null && this.alarmAt <= at && !lost) return;
    this.alarmAt = at;
    this.ctx.storage.setAlarm(at).catch((e: unknown) => {
      this.alarmAt = null; // the next write tries again
      console.error("floodgate: could not set the channel's alarm", e instanceof Error ? e.message : e);
    });
  }

  /** After a write: an alarm is set, so a channel that then goes quiet is still expired. */
  private ensureExpiry(): void {
    if (this.isAnalytics()) return;
    const ttl = getConfig(this.env).historyTtlMs;
    this.scheduleAlarm((this.counter("last_publish_at") || Date.now()) + ttl);
  }

  /**
   * Idle expiry: once nobody has published for `HISTORY_TTL` and nobody is subscribed, deletes
   * everything this object stored (messages, counters, keys, the alarm). The analytics channel is
   * kept by its own retention instead. Returns true when it deleted.
   */
  private async expireIdle(now: number): Promise<boolean> {
    if (this.isAnalytics() || this.wiped) return false;
    // Revived without a publish (a subscriber, a sampler visit): the expiry counts from now.
    if (!this.counter("last_publish_at")) this.set({ last_publish_at: now });
    const ttl = getConfig(this.env).historyTtlMs;
    if (this.occupancy() > 0) {
      // In use: look again later; the last subscriber leaving schedules the real time.
      this.scheduleAlarm(now + ttl);
      return false;
    }
    const expiresAt = (this.counter("last_publish_at") || now) + ttl;
    if (now < expiresAt) {
      this.scheduleAlarm(expiresAt);
      return false;
    }
    // Relays left registered but empty (a reserved slot that lapsed) hear the head and are told to
    // leave, so they delete their storage too.
    this.probeRelays(now, true);
    // Issued and marked in one synchronous step: anything that runs while they settle recreates the
    // tables instead of writing to ones that are gone.
    const deleted = Promise.all([this.ctx.storage.deleteAlarm(), this.ctx.storage.deleteAll()]);
    this.wiped = true;
    this.alarmAt = null;
    this.counters.clear();
    this.channel = null;
    this.lastSample = null;
    this.pendingLive = [];
    this.forgetRelays();
    this.sampledCache = null;
    this.lastSeenReport = 0;
    this.fastRate = 0;
    this.toldTarget = undefined;
    this.fastTargetCache = undefined;
    this.rearmedAt = 0;
    await deleted;
    return true;
  }

  /** Forgets Idempotency-Keys past their 10 minutes, without waiting for the next keyed publish. */
  private expireIdempotencyKeys(now: number): void {
    if (this.wiped) return;
    this.sql.exec("DELETE FROM idempotency WHERE expires_at <= ?", now);
    const next = this.sql.exec<{ at: number | null }>("SELECT MIN(expires_at) AS at FROM idempotency").one().at;
    if (next !== null) this.scheduleAlarm(Math.max(next, now + ALARM_SLACK_MS));
  }

  /** The last subscriber left: the idle expiry counts from the last publish, not from the next check. */
  private subscriberLeft(): void {
    if (this.wiped || this.occupancy() > 0 || this.isAnalytics() || this.channel === null) return;
    const ttl = getConfig(this.env).historyTtlMs;
    const now = Date.now();
    this.scheduleAlarm(Math.max(now, (this.counter("last_publish_at") || now) + ttl));
  }

  // ---- fast loop ---------------------------------------------------------------------------------

  /**
   * One fast-loop period ends: the sampler's law on its counts gives the rate the next answers carry.
   * The loop goes on while the channel is busy (any traffic in the period) or throttled, and stops —
   * no alarm at all — once a period passes with no traffic, which also releases the rate to 0.
   */
  private fastLoopTick(now: number): void {
    if (this.wiped) return;
    const due = this.counter("fast_due_at");
    if (!due) return;
    if (now < due) {
      this.scheduleAlarm(due); // woken early for another job
      return;
    }
    const target = this.fastTarget();
    const delivered = this.counter("fast_delivered");
    const dropped = this.counter("fast_dropped");
    if (!target) {
      this.set({ fast_due_at: 0, fast_delivered: 0, fast_dropped: 0 });
      this.setFastRate(0);
      return;
    }
    const counts = {
      delivered,
      dropped,
      elapsedMs: Math.max(0, now - this.counter("fast_started_at")),
      occupancy: this.occupancy(),
    };
    const next = roundRate(nextDropRate(counts, this.fastRate, target));
    this.setFastRate(next);
    const busy = delivered + dropped > 0;
    const nextDue = busy || next > 0 ? now + getConfig(this.env).samplerFastPeriodMs : 0;
    this.set({ fast_delivered: 0, fast_dropped: 0, fast_started_at: now, fast_due_at: nextDue, fast_decided_at: now });
    if (nextDue) this.scheduleAlarm(nextDue);
  }

  /** Starts the fast loop's first period at `now` when a channel with a target is not running it yet. */
  private startFastLoop(now: number): void {
    if (!this.fastTarget()) return;
    const period = getConfig(this.env).samplerFastPeriodMs;
    const running = this.counter("fast_due_at");
    let wake: number;
    if (running) {
      // Running, unless its alarm is a whole period overdue (lost): then wake it now, once a period.
      if (now < running + period || now - this.rearmedAt < period) return;
      this.rearmedAt = now;
      wake = now;
    } else {
      wake = now + period;
      this.set({ fast_delivered: 0, fast_dropped: 0, fast_started_at: now, fast_due_at: wake });
    }
    // A failure never fails the publish that started the loop: a lost alarm is re-armed (above).
    this.scheduleAlarm(wake);
  }

  /** When a lost fast-loop alarm was last re-armed (epoch ms). */
  private rearmedAt = 0;

  /** The rate answers carry: the fast loop's, or null for a channel without one. */
  private currentRate(): ChannelRate {
    return this.fastTarget() ? this.fastRate : null;
  }

  private setFastRate(rate: number): void {
    if (rate === this.fastRate) return;
    this.fastRate = rate;
    this.sql.exec("INSERT OR REPLACE INTO meta (name, value) VALUES ('fast_rate', ?)", String(rate));
  }

  /** The fast loop's target in messages per second; undefined until computed. */
  private fastTargetCache: { kind: Target["kind"]; perSecond: number } | null | undefined = undefined;

  /** The target the fast loop holds: the one the sampler or admin API gave, else the configured one. */
  private fastTarget(): { kind: Target["kind"]; perSecond: number } | null {
    if (this.fastTargetCache !== undefined) return this.fastTargetCache;
    const channel = this.channel;
    if (!channel) return null; // not known yet: decide once it is
    let target: Target | null = null;
    try {
      const config = getConfig(this.env);
      if (channel !== config.analyticsChannel.name) {
        target =
          this.toldTarget !== undefined ? parseTarget(this.toldTarget) : targetFor(config, parseChannelName(channel));
      }
    } catch {
      target = null; // bad config, or a name that is not a channel: no fast loop
    }
    this.fastTargetCache = target ? { kind: target.kind, perSecond: target.perSecond } : null;
    return this.fastTargetCache;
  }

  /** Subscribers of every relay, and those on their way to one (slots reserved). */
  private occupancy(): number {
    const t = this.relays.totals(Date.now());
    return t.websockets + t.sse + t.reserved;
  }

  /**
   * Whether this object is kept by `ANALYTICS_RETENTION` rather than expired as idle: the record of
   * dropped messages (also after `ANALYTICS_CHANNEL` was renamed), or the configured analytics channel.
   */
  private isAnalytics(): boolean {
    if (this.isRecord()) return true;
    try {
      return this.channel !== null && this.channel === getConfig(this.env).analyticsChannel.name;
    } catch {
      return true; // bad configuration: never delete on a guess
    }
  }

  // ---- relays -------------------------------------------------------------------------------------

  /**
   * A slot for one subscriber on a relay of its placement group (src/delivery/relay-registry.ts), or `full`
   * past `maxSubscribers`. The Worker passes the capacities from its configuration. Answers the head
   * seq too: the subscriber gets every message after it (or after its `?after=`, if lower).
   */
  assignRelay(channel: string, group: string, capacity: number, maxSubscribers: number): RelayAssignment {
    this.revive();
    this.remember(channel);
    this.ensureExpiry();
    const now = Date.now();
    this.relays.sweep(now);
    const a = this.relays.assign(group, capacity, maxSubscribers, now);
    // Refused, or a new relay opened: counts matter now, and a relay reset since its last report
    // (its WebSockets dropped) still counts them until something wakes it. Wake them all.
    if ("full" in a || !this.relays.get(a.relay)?.active) this.probeRelays(now);
    if ("full" in a) return a;
    const entry = this.relays.get(a.relay) as RelayEntry;
    return { ...a, group, k: entry.k, head: this.counter("next_seq") };
  }

  /**
   * A relay's counts after a change (src/delivery/relay.ts): joins confirm their reserved slots, and a relay
   * reported empty with no slot reserved leaves. Its first report puts it on the delivery list.
   */
  relayReport(channel: string, report: RelayReport): RelayReportAnswer {
    const empty = report.websockets + report.sse === 0;
    // A relay emptied after the channel deleted itself keeps it deleted.
    if (this.wiped && empty) return { leave: true, head: 0 };
    this.revive();
    this.remember(channel);
    const answer = this.relays.report(report, Date.now());
    if (report.slowClosed > 0) this.bump({ slow_consumers_closed: report.slowClosed });
    if (answer.leave) {
      this.pipes.get(report.relay)?.stop();
      this.pipes.delete(report.relay);
      this.subscriberLeft();
    }
    return { leave: answer.leave, head: this.counter("next_seq") };
  }

  /**
   * Retained frames with seq in (`after`, `upTo`], oldest first, up to `maxBytes` (at least one;
   * `more` when some were left out): a relay's repair of a hole and a joining subscriber's replay.
   */
  framesAfter(after: number, upTo: number, maxBytes: number): { frames: LiveFrame[]; more: boolean } {
    if (this.wiped) return { frames: [], more: false };
    const channel = this.channel ?? "";
    const rows = this.sql.exec<MessageRow>(
      "SELECT seq, id, data, published_at FROM messages WHERE seq > ? AND seq <= ? ORDER BY seq ASC",
      after,
      upTo,
    );
    // Read lazily: rows past the bound are never loaded.
    function* frames(): Generator<LiveFrame> {
      for (const r of rows) yield { seq: r.seq, text: frame(channel, r) };
    }
    return takeFrameBytes(frames(), Math.min(maxBytes, PAGE_MAX_BYTES));
  }

  /** Sends the messages appended by the last transaction to every active relay, on its own line. */
  private fanOut(): void {
    const messages = this.pendingLive;
    this.pendingLive = [];
    if (messages.length === 0) return;
    const active = this.relays.active();
    // No one listening (the analytics channel, usually): no frames to build.
    if (active.length === 0) return;
    const channel = this.channel ?? "";
    const frames = messages.map((m) => ({ seq: m.seq, text: frame(channel, m) }));
    const head = this.counter("next_seq");
    for (const e of active) this.pipeTo(e.name).push(frames, head);
    // A wake-up soon after: if this instance is reset with frames still on a line, the next one
    // (its constructor) tells every relay the head, so a quiet channel's relays still repair.
    this.scheduleAlarm(Date.now() + RELAY_WAKE_MS);
  }

  /**
   * Every active relay hears the head (at most once per {@link RELAY_PROBE_MS} unless `force`): each
   * wakes, and one reset since its last report reports its true counts from its constructor, while
   * an empty one is told to leave (src/delivery/relay.ts).
   */
  private probeRelays(now: number, force = false): void {
    if (!force && now - this.lastProbe < RELAY_PROBE_MS) return;
    this.lastProbe = now;
    const head = this.counter("next_seq");
    for (const e of this.relays.active()) this.pipeTo(e.name).sync(head);
  }

  /** After a restart: each relay no batch has been sent to yet hears the head (see the constructor). */
  private syncRelays(): void {
    const head = this.counter("next_seq");
    for (const e of this.relays.active()) {
      const pipe = this.pipeTo(e.name);
      if (!pipe.used) pipe.sync(head);
    }
  }

  private pipeTo(name: string): RelayPipe {
    let pipe = this.pipes.get(name);
    if (!pipe) {
      pipe = new RelayPipe((frames, head) => {
        this.unsavedSends++;
        return relayStub(this.env, name).deliver(frames, head);
      }, SUBSCRIBER_MAX_BEHIND_BYTES);
      this.pipes.set(name, pipe);
    }
    return pipe;
  }

  /**
   * Relay calls made since they were last stored. Counted in memory and stored with the next publish's
   * counters (in its transaction, at no extra write): a counter write per relay call would cost more
   * than the count is worth. Calls made after the last publish are lost if the object restarts.
   */
  private unsavedSends = 0;

  /** Inside a publish's transaction: the calls counted since the last one go into `relay_sends_total`. */
  private saveRelaySends(): number {
    const n = this.unsavedSends;
    if (n > 0) this.bump({ relay_sends_total: n });
    return n;
  }

  private saveRelay(e: RelayEntry): void {
    this.revive();
    this.sql.exec(
      "INSERT OR REPLACE INTO relays (name, grp, k, websockets, sse) VALUES (?, ?, ?, ?, ?)",
      e.name,
      e.group,
      e.k,
      e.websockets,
      e.sse,
    );
  }

  /** Deleted with everything else (idle expiry): no relay is left on a line. */
  private forgetRelays(): void {
    for (const pipe of this.pipes.values()) pipe.stop();
    this.pipes.clear();
    this.relays.clear();
    this.unsavedSends = 0;
  }

  // ---- internals ---------------------------------------------------------------------------------

  /** Messages appended by the current transaction, sent live once it commits. */
  private pendingLive: MessageFields[] = [];
  /** Inside {@link inBatch}: counters changed but not yet written. */
  private deferred: Set<CounterName> | null = null;

  /**
   * Appends one message; the batch around it trims history once, at its end. On the analytics channel
   * a message also stores its source channel and drop time (a direct publish: its own time), which
   * the record's indexes and retention use; elsewhere both stay null and cost no index entry.
   */
  private append(
    data: string,
    publisher: string,
    now: number,
    copy?: Pick<CopyItem, "id" | "source_channel" | "dropped_at">,
  ): { seq: number; id: string } {
    const seq = this.counter("next_seq") + 1;
    const id = copy?.id ?? crypto.randomUUID();
    const record = this.isRecord();
    this.sql.exec(
      "INSERT INTO messages (seq, id, data, publisher, published_at, source_channel, dropped_at) VALUES (?, ?, ?, ?, ?, ?, ?)",
      seq,
      id,
      data,
      publisher,
      now,
      copy?.source_channel ?? null,
      copy?.dropped_at ?? (record ? now : null),
    );
    this.bump({ next_seq: 1, delivered_total: 1, period_delivered: 1 });
    this.pendingLive.push({ seq, id, data, published_at: now });
    return { seq, id };
  }

  /**
   * Runs `fn` in one transaction with counter writes gathered into one statement at its end: a batch
   * of 100 messages would otherwise write the counters 100 times.
   */
  private inBatch(fn: () => void): void {
    const counters = new Map(this.counters);
    const pending = this.pendingLive.length;
    const channel = this.channel;
    // An alarm set inside the transaction is undone with it, so the cached time must be too.
    const alarmAt = this.alarmAt;
    try {
      this.ctx.storage.transactionSync(() => {
        const dirty = new Set<CounterName>();
        this.deferred = dirty;
        try {
          fn();
        } finally {
          this.deferred = null;
        }
        this.set(Object.fromEntries([...dirty].map((k) => [k, this.counter(k)])));
      });
    } catch (e) {
      // The transaction rolled back, so memory does too: otherwise its counters would run ahead of
      // storage and its messages would go out live although their publishers were told it failed.
      this.counters.clear();
      for (const [k, v] of counters) this.counters.set(k, v);
      this.pendingLive.length = pending;
      this.channel = channel;
      this.alarmAt = alarmAt;
      throw e;
    }
  }

  private trimHistory(lastSeq: number): void {
    if (this.isRecord()) return; // kept for ANALYTICS_RETENTION instead, trimmed by the alarm
    const limit = getConfig(this.env).historyLimit;
    if (lastSeq > limit) this.sql.exec("DELETE FROM messages WHERE seq <= ?", lastSeq - limit);
  }

  /** Set once this object has received analytics copies (stored in meta as "record"). */
  private recordRole = false;

  /**
   * Whether this object is the analytics channel: it has received copies, or it bears the configured
   * name (a message published to it directly, before any copy, is kept for the retention too).
   */
  private isRecord(): boolean {
    if (this.recordRole) return true;
    if (this.channel === null) return false;
    try {
      return this.channel === getConfig(this.env).analyticsChannel.name;
    } catch {
      return false; // bad config: the Worker refuses every request anyway
    }
  }

  private becomeRecord(): void {
    if (this.recordRole) return;
    this.recordRole = true;
    this.sql.exec("INSERT OR REPLACE INTO meta (name, value) VALUES ('record', '1')");
    // Messages kept before this object knew it was the record expire by their own time.
    this.sql.exec("UPDATE messages SET dropped_at = published_at WHERE dropped_at IS NULL");
  }

  /**
   * The record's columns and indexes. Partial indexes: a channel that is not the record leaves both
   * columns null, so its publishes write no index entry. Each index ends in the rowid (seq), the
   * tie-break of every order used. Objects created before the columns existed get them added.
   */
  private addRecordColumns(): void {
    const columns = new Set(
      this.sql
        .exec<{ name: string }>("PRAGMA table_info(messages)")
        .toArray()
        .map((r) => r.name),
    );
    if (!columns.has("source_channel")) this.sql.exec("ALTER TABLE messages ADD COLUMN source_channel TEXT");
    if (!columns.has("dropped_at")) this.sql.exec("ALTER TABLE messages ADD COLUMN dropped_at INTEGER");
    this.sql.exec(
      "CREATE INDEX IF NOT EXISTS messages_by_source ON messages (source_channel, seq) WHERE source_channel IS NOT NULL",
    );
    this.sql.exec(
      "CREATE INDEX IF NOT EXISTS messages_by_drop_time ON messages (dropped_at) WHERE dropped_at IS NOT NULL",
    );
    this.sql.exec(
      "CREATE INDEX IF NOT EXISTS messages_by_source_time ON messages (source_channel, dropped_at) WHERE source_channel IS NOT NULL",
    );
  }

  private remember(channel: string): void {
    if (this.channel === null && channel) {
      this.revive();
      this.channel = channel;
      this.sql.exec("INSERT OR REPLACE INTO meta (name, value) VALUES ('channel', ?)", channel);
      // A channel first used by a subscriber expires from then, like one first used by a publish.
      if (!this.counter("last_publish_at")) this.set({ last_publish_at: Date.now() });
    }
  }

  private counter(name: CounterName): number {
    return this.counters.get(name) ?? 0;
  }

  private bump(deltas: Partial<Record<CounterName, number>>): void {
    const next: Partial<Record<CounterName, number>> = {};
    for (const [k, d] of Object.entries(deltas) as [CounterName, number][]) {
      if (d) next[k] = this.counter(k) + d;
    }
    const traffic = (deltas.period_delivered ?? 0) + (deltas.period_dropped ?? 0);
    if (traffic) {
      this.startFastLoop(Date.now());
      if (this.counter("fast_due_at")) {
        next.fast_delivered = this.counter("fast_delivered") + (deltas.period_delivered ?? 0);
        next.fast_dropped = this.counter("fast_dropped") + (deltas.period_dropped ?? 0);
      }
    }
    if (traffic && !this.counter("period_started_at")) next.period_started_at = Date.now();
    this.set(next);
    if (traffic && !this.marking && this.periodWeight() > this.counter("period_marked")) this.markActive();
  }

  /** This period's traffic as a weight for the sampler's order: 1 from 1 message, 2 from 10, 3 from 100, … */
  private periodWeight(): number {
    return trafficWeight(this.counter("period_delivered") + this.counter("period_dropped"));
  }

  /**
   * Reports the first traffic of a period to the sampler's registry, and again at each order of
   * magnitude of it (10, 100, … messages: a few calls per period, so the sampler can visit the busiest
   * first), only for a channel the sampler manages (one with a target; never the analytics channel). The RPC that
   * counted the traffic waits for it (see {@link settled}) so the report is never cut off; a
   * registry failure is logged and retried on the next message, and never fails a publish.
   */
  private markActive(): void {
    const channel = this.channel;
    if (!channel) return;
    if (!this.sampled(channel)) {
      this.reportSeen(channel);
      return;
    }
    const reported = this.counter("period_marked");
    const weight = this.periodWeight();
    this.set({ period_marked: weight });
    const registry = activeChannelsStub(this.env);
    this.marking = registry.markActive(channel, weight).then(
      (lastRunAt) => {
        // A channel idle through earlier runs starts its period at the last run, not long before.
        if (!this.wiped && lastRunAt && lastRunAt > this.counter("period_started_at")) {
          this.set({ period_started_at: lastRunAt });
        }
        this.marking = null;
        // Traffic that came while this report was in flight may have reached the next weight.
        if (!this.wiped && this.periodWeight() > this.counter("period_marked")) this.markActive();
      },
      (e) => {
        console.error(
          "floodgate: could not report channel activity to the sampler",
          e instanceof Error ? e.message : e,
        );
        if (!this.wiped) this.set({ period_marked: reported });
        this.marking = null;
      },
    );
  }

  /** When this object last told the registry it had traffic (channels the sampler does not visit). */
  private lastSeenReport = 0;

  /** At most once a minute: lets the dashboard list channels without a target too. */
  private reportSeen(channel: string): void {
    const now = Date.now();
    if (now - this.lastSeenReport < 60_000 || channel === getConfig(this.env).analyticsChannel.name) return;
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

  /** Returns `value` once any activity report this call started has been made. */
  private async settled<T>(value: T): Promise<T> {
    if (this.marking) await this.marking;
    return value;
  }

  /** Whether the sampler manages this channel; fixed for the object's life (config is per isolate). */
  private sampledCache: boolean | null = null;

  private sampled(channel: string): boolean {
    this.sampledCache ??= this.computeSampled(channel);
    return this.sampledCache;
  }

  private computeSampled(channel: string): boolean {
    try {
      const config = getConfig(this.env);
      if (channel === config.analyticsChannel.name) return false;
      return targetFor(config, parseChannelName(channel)) !== null;
    } catch {
      return false; // bad config or a name that is not a channel: nothing to sample
    }
  }

  private set(values: Partial<Record<CounterName, number>>): void {
    const entries = Object.entries(values) as [CounterName, number][];
    if (entries.length === 0) return;
    for (const [k, v] of entries) this.counters.set(k, v);
    if (this.deferred) {
      for (const [k] of entries) this.deferred.add(k);
      return;
    }
    this.revive();
    // One statement for all of them: a publish updates three counters, and each statement costs.
    this.sql.exec(
      `INSERT OR REPLACE INTO counters (name, value) VALUES ${entries.map(() => "(?, ?)").join(", ")}`,
      ...entries.flat(),
    );
  }
}

interface MessageRow {
  [key: string]: SqlStorageValue;
  seq: number;
  id: string;
  data: string;
  publisher: string;
  published_at: number;
  /** Analytics channel only: the copy's source channel (null for a message published to it directly). */
  source_channel: string | null;
  /** Analytics channel only: when the message was dropped (its published_at for a direct publish). */
  dropped_at: number | null;
}

/**
 * Rows of a query, in its order, until they hold {@link PAGE_MAX_BYTES} of message text (at least
 * one row); `cut` when rows were left. The query's cursor is read lazily, so rows past the cut are
 * never loaded.
 */
function takeBytes(cursor: Iterable<MessageRow>): { rows: MessageRow[]; cut: boolean } {
  const rows: MessageRow[] = [];
  let bytes = 0;
  for (const r of cursor) {
    if (rows.length > 0 && bytes + r.data.length > PAGE_MAX_BYTES) return { rows, cut: true };
    rows.push(r);
    bytes += r.data.length;
  }
  return { rows, cut: false };
}

interface RelayRow {
  [key: string]: SqlStorageValue;
  name: string;
  grp: string;
  k: number;
  websockets: number;
  sse: number;
}

/** The order of magnitude of a period's message count, for the sampler's busiest-first order. */
function trafficWeight(count: number): number {
  return count < 1 ? 0 : Math.floor(Math.log10(count)) + 1;
}
