/**
 * A channel's storage bounded by activity (docs/operations.md, "Storage bounded by activity"): once
 * nobody has published for `HISTORY_TTL` and nobody is subscribed, the object's alarm deletes
 * everything it stored. The analytics channel is kept by its own retention instead
 * (src/record/channel-record.ts).
 */
import type { AlarmScheduler } from "../platform/alarm-scheduler";
import { getConfig } from "../platform/config";
import type { ChannelStore } from "./channel-store";

/** What idle expiry needs to know of the rest of the channel's object. */
export interface IdleExpiryParts {
  /** Kept by `ANALYTICS_RETENTION` instead: never expired as idle. */
  isAnalytics(): boolean;
  /** Subscribers of every relay, and those on their way to one. */
  occupancy(): number;
  /** Before deleting: every relay hears the head, so an empty one is told to leave and deletes its storage too. */
  probeRelays(now: number): void;
  /** Deleted: memory forgets what storage no longer has. */
  forget(): void;
}

export class IdleExpiry {
  constructor(
    private readonly store: ChannelStore,
    private readonly scheduler: AlarmScheduler,
    private readonly env: Env,
    private readonly parts: IdleExpiryParts,
  ) {}

  /** After a write: an alarm is set, so a channel that then goes quiet is still expired. */
  ensure(): void {
    if (this.parts.isAnalytics()) return;
    const ttl = getConfig(this.env).historyTtlMs;
    this.scheduler.request((this.store.counter("last_publish_at") || Date.now()) + ttl);
  }

  /**
   * Deletes everything this object stored (messages, counters, keys, the alarm) when it is due, and
   * otherwise asks the alarm for when it will be. Returns true when it deleted.
   */
  async expire(now: number): Promise<boolean> {
    if (this.parts.isAnalytics() || this.store.wiped) return false;
    // Revived without a publish (a subscriber, a sampler visit): the expiry counts from now.
    if (!this.store.counter("last_publish_at")) this.store.set({ last_publish_at: now });
    const ttl = getConfig(this.env).historyTtlMs;
    if (this.parts.occupancy() > 0) {
      // In use: look again later; the last subscriber leaving schedules the real time.
      this.scheduler.request(now + ttl);
      return false;
    }
    const expiresAt = (this.store.counter("last_publish_at") || now) + ttl;
    if (now < expiresAt) {
      this.scheduler.request(expiresAt);
      return false;
    }
    // Relays left registered but empty (a reserved slot that lapsed) hear the head and are told to
    // leave, so they delete their storage too.
    this.parts.probeRelays(now);
    const deleted = this.store.wipe();
    this.parts.forget();
    await deleted;
    return true;
  }

  /** The last subscriber left: the idle expiry counts from the last publish, not from the next check. */
  subscriberLeft(): void {
    const store = this.store;
    if (store.wiped || this.parts.occupancy() > 0 || this.parts.isAnalytics() || store.channel === null) return;
    const ttl = getConfig(this.env).historyTtlMs;
    const now = Date.now();
    this.scheduler.request(Math.max(now, (store.counter("last_publish_at") || now) + ttl));
  }
}
