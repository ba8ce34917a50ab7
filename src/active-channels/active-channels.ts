/**
 * ActiveChannels — one Durable Object ("sampler") that knows which channels the sampler must visit,
 * so a run never lists every channel ever created.
 *
 * A channel object reports itself once per sampling period, on its first counted message after the
 * sampler last took its counts (`markActive`). The sampler also keeps visiting every channel it left
 * with a non-zero drop rate (`throttled`), even when no traffic arrives, so an idle channel's rate
 * is released to 0 instead of waiting for the next message.
 *
 * Marks carry a generation: a channel that reports itself again while a run is visiting it keeps its
 * new mark when the run finishes, so no period of traffic is ever missed.
 *
 * Marks also carry a weight, the order of magnitude of the channel's traffic this period (a channel
 * reports again at 10, 100, 1,000, … messages): a run visits at most `SAMPLER_MAX_CHANNELS`, still
 * throttled channels first, then runtime targets, then the busiest marks (oldest first among equals);
 * the rest keep their marks for the next run (docs/operations.md, "Sampler limits per run").
 *
 * The registry is bounded whatever names a flood makes up: it keeps at most {@link ACTIVE_KEPT} marks
 * (past it the lightest, newest marks go first: those a run would visit last, so a flood of made-up
 * names pushes out its own marks, never a busy channel's), forgets a mark no run visited within
 * {@link MARK_TTL_MS} (the channel marks itself again at its next order of magnitude of traffic), and
 * a run reads only the rows it visits, through indexes. Throttled channels are visited least recently
 * visited first, so each is released in turn even when more are throttled than one run visits.
 *
 * It also remembers when each channel last had traffic and the sampler's latest sample of it (for the
 * dashboard's overview; channels without a target report at most once a minute) and holds targets set
 * at runtime through the admin API, which take precedence over `THROTTLE_TARGET(S)`; the sampler visits
 * those channels every run.
 */
import { DurableObject } from "cloudflare:workers";
import type { TargetJson } from "../settings/targets";
import { PusherChannelList } from "./pusher-channels";
import { createActiveChannelsTables } from "./schema";
import { SERIES_CHANNELS, SERIES_POINTS, type SeriesPoint } from "./series";

/** Channels the dashboard's "recently seen" list keeps. */
const SEEN_KEPT = 1000;
/** Most marked channels the registry keeps (docs/operations.md, "Sampler limits per run"). */
export const ACTIVE_KEPT = 10_000;
/** A mark no run visited for this long is forgotten (an hour: 60 one-minute runs passed it by). */
export const MARK_TTL_MS = 60 * 60_000;
/** Marks beyond the bound before they are trimmed, so a flood does not sort the table on every mark. */
const TRIM_STEP = 100;

export interface RunStart {
  /** Channels to visit, with the generation of their mark (0 for throttled-only channels). */
  channels: { channel: string; generation: number }[];
  /** Channels left for a later run because of the per-run cap. */
  deferred: number;
  /** Runtime targets (they override THROTTLE_TARGET(S)). */
  targets: Record<string, TargetJson>;
  /** When the previous run started (epoch ms), or null for the first run. */
  previousRunAt: number | null;
}

export class ActiveChannels extends DurableObject<Env> {
  private readonly sql: SqlStorage;
  private readonly pusher: PusherChannelList;

  constructor(ctx: DurableObjectState, env: Env) {
    super(ctx, env);
    this.sql = ctx.storage.sql;
    createActiveChannelsTables(this.sql);
    this.pusher = new PusherChannelList(this.sql);
  }

  /** A `pusher:` channel's subscribers and presence members (src/active-channels/pusher-channels.ts). */
  notePusherChannel(channel: string, subscriptions: number, users: number): void {
    this.pusher.note(channel, subscriptions, users);
  }

  /** Occupied Pusher channels starting with `prefix`, by name, at most `limit`. */
  pusherChannels(prefix: string, limit: number): { channel: string; users: number }[] {
    return this.pusher.list(prefix, limit);
  }

  /** Rows in `seen`, once counted: trimming is needed only when it grows past the bound. */
  private seenRows: number | null = null;
  /** Rows in `active`, once counted (at most one too many: a mark that replaced one). */
  private activeRows: number | null = null;

  /**
   * A channel had traffic at `at` (epoch ms). Bounded: only the 1,000 most recent are kept, trimmed
   * in steps of 100 so a flood of new channels does not sort the table on every mark.
   */
  markSeen(channel: string, at: number = Date.now()): void {
    // An upsert, not a replace: the row keeps its sample.
    this.sql.exec(
      "INSERT INTO seen (channel, at) VALUES (?, ?) ON CONFLICT (channel) DO UPDATE SET at = excluded.at",
      channel,
      at,
    );
    this.seenRows ??= this.sql.exec<{ n: number }>("SELECT COUNT(*) AS n FROM seen").one().n;
    this.seenRows++; // at most one too many (a replaced row): trims a little early, never late
    if (this.seenRows > SEEN_KEPT + 100) {
      this.sql.exec(
        "DELETE FROM seen WHERE channel NOT IN (SELECT channel FROM seen ORDER BY at DESC LIMIT ?)",
        SEEN_KEPT,
      );
      this.seenRows = this.sql.exec<{ n: number }>("SELECT COUNT(*) AS n FROM seen").one().n;
    }
  }

  /**
   * A channel's latest summary frame (JSON text), for the dashboard's card: the channel sends one at
   * most every {@link SUMMARY_REPORT_MS}. It counts as traffic seen, so the row is bounded like the rest.
   */
  noteSummary(channel: string, summary: string, at: number = Date.now()): void {
    this.markSeen(channel, at);
    this.sql.exec("UPDATE seen SET summary = ? WHERE channel = ?", summary, channel);
  }

  /** Channels with traffic since `since` (epoch ms), most recent first. */
  recentlySeen(since: number, limit = 100): { channel: string; at: number }[] {
    return this.sql
      .exec<{ channel: string; at: number }>(
        "SELECT channel, at FROM seen WHERE at >= ? ORDER BY at DESC LIMIT ?",
        since,
        limit,
      )
      .toArray();
  }

  /**
   * The dashboard's summary in one call: channels with traffic since `since` (most recent first, at
   * most `limit`), each with the sampler's latest sample of it and its latest summary of drops as JSON
   * text (null if none), and the runtime targets.
   */
  overview(
    since: number,
    limit: number,
  ): {
    channels: { channel: string; at: number; sample: string | null; summary: string | null; series: SeriesPoint[] }[];
    targets: Record<string, TargetJson>;
  } {
    const channels = this.sql
      .exec<{ channel: string; at: number; sample: string | null; summary: string | null }>(
        "SELECT channel, at, sample, summary FROM seen WHERE at >= ? ORDER BY at DESC LIMIT ?",
        since,
        limit,
      )
      .toArray()
      .map((row) => ({ ...row, series: this.series(row.channel, since) }));
    return { channels, targets: this.targets() };
  }

  // ---- the dashboard's series ------------------------------------------------------------------

  /** A channel's points since `since` (epoch ms), oldest first: at most {@link SERIES_POINTS}. */
  series(channel: string, since = 0): SeriesPoint[] {
    return this.sql
      .exec<{ point: string }>(
        "SELECT point FROM series WHERE channel = ? AND at >= ? ORDER BY at ASC, by ASC LIMIT ?",
        channel,
        since,
        SERIES_POINTS,
      )
      .toArray()
      .map((r) => JSON.parse(r.point) as SeriesPoint);
  }

  /**
   * Appends a run's points; keeps the newest {@link SERIES_POINTS} of each channel and the series of
   * the {@link SERIES_CHANNELS} most recently seen channels only, so neither a long run nor a flood of
   * names grows the table.
   */
  private appendSeries(channel: string, points: SeriesPoint[]): void {
    for (const p of points.slice(-SERIES_POINTS)) {
      this.sql.exec(
        "INSERT OR REPLACE INTO series (channel, at, by, point) VALUES (?, ?, ?, ?)",
        channel,
        p.at,
        p.by,
        JSON.stringify(p),
      );
    }
    this.sql.exec(
      `DELETE FROM series WHERE channel = ? AND at < (SELECT MIN(at) FROM
         (SELECT at FROM series WHERE channel = ? ORDER BY at DESC LIMIT ?))`,
      channel,
      channel,
      SERIES_POINTS,
    );
  }

  /** Series of channels no longer among the most recently seen go. */
  private trimSeriesChannels(): void {
    this.sql.exec(
      "DELETE FROM series WHERE channel NOT IN (SELECT channel FROM seen ORDER BY at DESC LIMIT ?)",
      SERIES_CHANNELS,
    );
  }

  /** Runtime targets, as the JSON the admin API took (a shorthand string or {"deliveries": …}). */
  targets(): Record<string, TargetJson> {
    const out: Record<string, TargetJson> = {};
    for (const r of this.sql.exec<{ channel: string; target: string }>("SELECT channel, target FROM targets")) {
      out[r.channel] = JSON.parse(r.target) as TargetJson;
    }
    return out;
  }

  /** Sets (or with null, clears) a channel's runtime target. The caller validates it. */
  setTarget(channel: string, target: TargetJson | null): void {
    if (target === null) this.sql.exec("DELETE FROM targets WHERE channel = ?", channel);
    else
      this.sql.exec("INSERT OR REPLACE INTO targets (channel, target) VALUES (?, ?)", channel, JSON.stringify(target));
  }

  /**
   * A channel saw its first traffic since the sampler last took its counts. Returns when the last run
   * started, so the channel can start its period there rather than at a stale earlier time.
   */
  markActive(channel: string, weight = 1, now: number = Date.now()): number | null {
    this.markSeen(channel, now);
    const gen = this.meta("generation") + 1;
    this.setMeta("generation", gen);
    this.sql.exec(
      `INSERT INTO active (channel, generation, weight, marked_at) VALUES (?, ?, ?, ?)
       ON CONFLICT (channel) DO UPDATE SET generation = excluded.generation, weight = MAX(weight, excluded.weight),
       marked_at = excluded.marked_at`,
      channel,
      gen,
      weight,
      now,
    );
    this.activeRows ??= this.countActive();
    this.activeRows++;
    if (this.activeRows > ACTIVE_KEPT + TRIM_STEP) {
      // The marks a run would visit last: lightest first, newest among equals.
      this.sql.exec(
        "DELETE FROM active WHERE channel IN (SELECT channel FROM active ORDER BY weight ASC, generation DESC LIMIT ?)",
        Math.max(0, this.countActive() - ACTIVE_KEPT),
      );
      this.activeRows = this.countActive();
    }
    return this.meta("last_run_at") || null;
  }

  private countActive(): number {
    return this.sql.exec<{ n: number }>("SELECT COUNT(*) AS n FROM active").one().n;
  }

  /**
   * Starts a run: at most `max` channels to visit — still throttled ones first (they must be
   * released), then runtime targets, then marks by weight, heaviest first. The rest keep their marks.
   */
  beginRun(now: number, max = Number.POSITIVE_INFINITY): RunStart {
    const previous = this.meta("last_run_at") || null;
    this.setMeta("last_run_at", now);
    this.sql.exec("DELETE FROM active WHERE marked_at < ?", now - MARK_TTL_MS);
    this.activeRows = null;
    // SQLite reads LIMIT -1 as no limit.
    const limit = Number.isFinite(max) ? Math.max(0, Math.floor(max)) : -1;
    const marked = new Map<string, number>();
    const order: string[] = [];
    const add = (channel: string) => {
      if (!marked.has(channel)) {
        marked.set(channel, 0);
        order.push(channel);
      }
    };
    const throttled = this.sql.exec<{ channel: string }>(
      "SELECT channel FROM throttled ORDER BY visited_at ASC LIMIT ?",
      limit,
    );
    for (const r of throttled) add(r.channel);
    for (const r of this.sql.exec<{ channel: string }>("SELECT channel FROM targets")) add(r.channel);
    // At most `max` more than are already chosen: enough to fill the run however many overlap.
    const active = this.sql
      .exec<{ channel: string; generation: number }>(
        "SELECT channel, generation FROM active ORDER BY weight DESC, generation ASC LIMIT ?",
        limit < 0 ? -1 : limit + order.length,
      )
      .toArray();
    for (const r of active) {
      add(r.channel);
      marked.set(r.channel, r.generation);
    }
    const visit = limit < 0 ? order : order.slice(0, limit);
    // Everything waiting, counted inside SQLite (no row leaves it): what this run leaves for the next.
    const waiting = this.sql
      .exec<{ n: number }>(
        "SELECT COUNT(*) AS n FROM (SELECT channel FROM throttled UNION SELECT channel FROM targets UNION SELECT channel FROM active)",
      )
      .one().n;
    return {
      channels: visit.map((channel) => ({ channel, generation: marked.get(channel) ?? 0 })),
      deferred: Math.max(0, waiting - visit.length),
      targets: this.targets(),
      previousRunAt: previous,
    };
  }

  /**
   * Ends a run: forgets the marks of channels that were sampled (unless marked again meanwhile) and
   * records which channels are left throttled and each channel's new sample (for {@link overview}).
   * Channels whose visit failed keep their mark.
   */
  finishRun(
    sampled: { channel: string; generation: number; throttled: boolean; sample?: unknown; points?: SeriesPoint[] }[],
    now: number = Date.now(),
  ): void {
    this.ctx.storage.transactionSync(() => {
      for (const s of sampled) {
        if (s.sample)
          this.sql.exec("UPDATE seen SET sample = ? WHERE channel = ?", JSON.stringify(s.sample), s.channel);
        if (s.points?.length) this.appendSeries(s.channel, s.points);
        this.sql.exec("DELETE FROM active WHERE channel = ? AND generation = ?", s.channel, s.generation);
        if (s.throttled)
          this.sql.exec(
            `INSERT INTO throttled (channel, visited_at) VALUES (?, ?)
             ON CONFLICT (channel) DO UPDATE SET visited_at = excluded.visited_at`,
            s.channel,
            now,
          );
        else this.sql.exec("DELETE FROM throttled WHERE channel = ?", s.channel);
      }
      if (sampled.some((s) => s.points?.length)) this.trimSeriesChannels();
    });
  }

  /** What the registry holds, for tests and diagnostics. */
  snapshot(): { active: string[]; throttled: string[]; lastRunAt: number | null } {
    return {
      active: this.sql
        .exec<{ channel: string }>("SELECT channel FROM active ORDER BY channel")
        .toArray()
        .map((r) => r.channel),
      throttled: this.sql
        .exec<{ channel: string }>("SELECT channel FROM throttled ORDER BY channel")
        .toArray()
        .map((r) => r.channel),
      lastRunAt: this.meta("last_run_at") || null,
    };
  }

  private meta(name: string): number {
    return this.sql.exec<{ value: number }>("SELECT value FROM meta WHERE name = ?", name).toArray()[0]?.value ?? 0;
  }

  private setMeta(name: string, value: number): void {
    this.sql.exec("INSERT OR REPLACE INTO meta (name, value) VALUES (?, ?)", name, value);
  }
}

/** Least time between two summaries one channel reports to the registry for the dashboard. */
export const SUMMARY_REPORT_MS = 10_000;
