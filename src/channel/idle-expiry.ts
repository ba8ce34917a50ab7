/**
 * A channel's storage bounded by activity (docs/operations.md, "Storage bounded by activity"): once
 * nobody has published for `HISTORY_TTL` and nobody is subscribed, the object's alarm deletes
 * everything it stored. A channel that never had a message (a made-up name somebody subscribed to)
 * has no history worth keeping: it is deleted {@link UNUSED_CHANNEL_TTL_MS} after its last subscriber
 * left, so a flood of subscribes to made-up names leaves nothing behind. The analytics channel is kept
 * by its own retention instead (src/channel/record.ts).
 */
import type { AlarmScheduler } from "../platform/alarm-scheduler";
import { settingsOf } from "../settings/settings";
import { SHARD_REFRESH_MS } from "./shard-registry";
import type { ChannelStore } from "./store";

/** How long a channel that never had a message keeps its storage once nobody is subscribed. */
export const UNUSED_CHANNEL_TTL_MS = 60_000;

/** How soon a deletion that failed is tried again. */
export const WIPE_RETRY_MS = 60_000;

/** What idle expiry needs to know of the rest of the channel's object. */
export interface IdleExpiryParts {
  /** Kept by `ANALYTICS_RETENTION` instead: never expired as idle. */
  isRecord(): boolean;
  /** Subscribers of every relay, and those on their way to one. */
  occupancy(): number;
  /** Subscribers of every relay as they reported them (slots reserved for those on their way not included). */
  subscribed(): number;
  /** Before deleting: every relay hears the head, so an empty one is told to leave and deletes its storage too. */
  probeRelays(now: number): void;
  /** Deleted: memory forgets what storage no longer has. */
  forget(): void;
}

export class IdleExpiry {
  /** When the last subscriber left (memory only: after a restart the stored alarm still comes). */
  private lastLeftAt = 0;

  constructor(
    private readonly store: ChannelStore,
    private readonly scheduler: AlarmScheduler,
    private readonly env: Env,
    private readonly parts: IdleExpiryParts,
  ) {}

  /** After a write: an alarm is set, so a channel that then goes quiet is still expired. */
  ensure(): void {
    if (this.parts.isRecord()) return;
    this.scheduler.request((this.store.counter("last_publish_at") || Date.now()) + this.ttl());
  }

  /**
   * A channel that ever took a publish (kept or dropped) keeps its history and counts for
   * `HISTORY_TTL`; one that never did has nothing anybody could read back.
   */
  private used(): boolean {
    return (
      this.store.counter("last_seq") > 0 ||
      this.store.counter("dropped_total") > 0 ||
      this.store.counter("shards_seen_at") > 0
    );
  }

  private ttl(): number {
    if (!this.used()) return UNUSED_CHANNEL_TTL_MS;
    // A sharded channel's registry outlives every shard it lists (src/channel/shard-registry.ts).
    const shards = this.store.counter("shards_seen_at") > 0 ? SHARD_REFRESH_MS : 0;
    return settingsOf(this.env).historyTtlMs + shards;
  }

  /** When idle expiry is due, counted from the last publish (or first use), or from the last leave if never used. */
  private dueAt(now: number): number {
    const since = Math.max(this.store.counter("last_publish_at"), this.store.counter("shards_seen_at")) || now;
    return (this.used() ? since : Math.max(since, this.lastLeftAt)) + this.ttl();
  }

  /**
   * Deletes everything this object stored (messages, counters, keys, the alarm) when it is due, and
   * otherwise asks the alarm for when it will be. Returns true when it deleted.
   */
  async expire(now: number): Promise<boolean> {
    if (this.parts.isRecord() || this.store.wiped) return false;
    // Revived without a publish (a subscriber, a sampler visit): the expiry counts from now.
    if (!this.store.counter("last_publish_at")) this.store.set({ last_publish_at: now });
    if (this.parts.occupancy() > 0) {
      // In use: look again later; the last subscriber leaving schedules the real time. Only slots
      // reserved for subscribers on their way (which lapse within a minute, unannounced if the
      // subscribe failed): look again soon.
      const subscribed = this.parts.subscribed() > 0;
      this.scheduler.request(now + (subscribed ? settingsOf(this.env).historyTtlMs : UNUSED_CHANNEL_TTL_MS));
      return false;
    }
    const expiresAt = this.dueAt(now);
    if (now < expiresAt) {
      this.scheduler.request(expiresAt);
      return false;
    }
    // Relays left registered but empty (a reserved slot that lapsed) hear the head and are told to
    // leave, so they delete their storage too.
    this.parts.probeRelays(now);
    const deleted = await this.store.wipe(() => {
      this.lastLeftAt = 0;
      this.parts.forget();
    });
    // Not deleted: nothing was forgotten, memory still matches storage, and the alarm tries again.
    if (!deleted) this.scheduler.request(now + WIPE_RETRY_MS);
    return deleted;
  }

  /**
   * A relay reported it has nobody left: once no relay has a subscriber, the idle expiry counts from
   * the last publish, or from now for a channel never used.
   */
  subscriberLeft(): void {
    const store = this.store;
    if (store.wiped || this.parts.subscribed() > 0 || this.parts.isRecord() || store.channel === null) return;
    const now = Date.now();
    this.lastLeftAt = now;
    // A slot still reserved lapses unannounced if its subscribe failed: the alarm looks again soon.
    if (this.parts.occupancy() > 0) this.scheduler.request(now + UNUSED_CHANNEL_TTL_MS);
    else this.scheduler.request(Math.max(now, this.dueAt(now)));
  }
}
