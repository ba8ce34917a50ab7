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
 * It also remembers when each channel last had traffic (for the dashboard's channel list; channels
 * without a target report at most once a minute) and holds targets set at runtime through the admin
 * API, which take precedence over `THROTTLE_TARGET(S)`; the sampler visits those channels every run.
 */
import { DurableObject } from "cloudflare:workers";
import type { TargetJson } from "./config";

/** The name of the one registry object. */
export const SAMPLER_REGISTRY = "sampler";

/** The registry's stub (one object for the deployment). */
export function samplerRegistry(env: Env): DurableObjectStub<ActiveChannels> {
  return env.SAMPLER.get(env.SAMPLER.idFromName(SAMPLER_REGISTRY));
}

export interface RunStart {
  /** Channels to visit, with the generation of their mark (0 for throttled-only channels). */
  channels: { channel: string; generation: number }[];
  /** Runtime targets (they override THROTTLE_TARGET(S)). */
  targets: Record<string, TargetJson>;
  /** When the previous run started (epoch ms), or null for the first run. */
  previousRunAt: number | null;
}

export class ActiveChannels extends DurableObject<Env> {
  private readonly sql: SqlStorage;

  constructor(ctx: DurableObjectState, env: Env) {
    super(ctx, env);
    this.sql = ctx.storage.sql;
    this.sql.exec("CREATE TABLE IF NOT EXISTS active (channel TEXT PRIMARY KEY, generation INTEGER NOT NULL)");
    this.sql.exec("CREATE TABLE IF NOT EXISTS throttled (channel TEXT PRIMARY KEY)");
    this.sql.exec("CREATE TABLE IF NOT EXISTS meta (name TEXT PRIMARY KEY, value INTEGER NOT NULL)");
    this.sql.exec("CREATE TABLE IF NOT EXISTS seen (channel TEXT PRIMARY KEY, at INTEGER NOT NULL)");
    this.sql.exec("CREATE TABLE IF NOT EXISTS targets (channel TEXT PRIMARY KEY, target TEXT NOT NULL)");
  }

  /** A channel had traffic at `at` (epoch ms). Bounded: only the 1,000 most recent are kept. */
  markSeen(channel: string, at: number = Date.now()): void {
    this.sql.exec("INSERT OR REPLACE INTO seen (channel, at) VALUES (?, ?)", channel, at);
    this.sql.exec("DELETE FROM seen WHERE channel NOT IN (SELECT channel FROM seen ORDER BY at DESC LIMIT 1000)");
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
  markActive(channel: string): number | null {
    this.markSeen(channel);
    const gen = this.meta("generation") + 1;
    this.setMeta("generation", gen);
    this.sql.exec("INSERT OR REPLACE INTO active (channel, generation) VALUES (?, ?)", channel, gen);
    return this.meta("last_run_at") || null;
  }

  /** Starts a run: the channels to visit (active, still throttled, or with a runtime target). */
  beginRun(now: number): RunStart {
    const previous = this.meta("last_run_at") || null;
    this.setMeta("last_run_at", now);
    const channels = new Map<string, number>();
    for (const r of this.sql.exec<{ channel: string }>("SELECT channel FROM throttled")) channels.set(r.channel, 0);
    for (const r of this.sql.exec<{ channel: string }>("SELECT channel FROM targets")) channels.set(r.channel, 0);
    for (const r of this.sql.exec<{ channel: string; generation: number }>("SELECT channel, generation FROM active")) {
      channels.set(r.channel, r.generation);
    }
    return {
      channels: [...channels].map(([channel, generation]) => ({ channel, generation })),
      targets: this.targets(),
      previousRunAt: previous,
    };
  }

  /**
   * Ends a run: forgets the marks of channels that were sampled (unless marked again meanwhile) and
   * records which channels are left throttled. Channels whose visit failed keep their mark.
   */
  finishRun(sampled: { channel: string; generation: number; throttled: boolean }[]): void {
    this.ctx.storage.transactionSync(() => {
      for (const s of sampled) {
        this.sql.exec("DELETE FROM active WHERE channel = ? AND generation = ?", s.channel, s.generation);
        if (s.throttled) this.sql.exec("INSERT OR IGNORE INTO throttled (channel) VALUES (?)", s.channel);
        else this.sql.exec("DELETE FROM throttled WHERE channel = ?", s.channel);
      }
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
