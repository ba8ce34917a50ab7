/**
 * A channel's storage and what memory keeps of it: the tables, the counters, the channel's name, and
 * the state "nothing is stored" that idle expiry leaves (docs/operations.md, "Storage bounded by
 * activity"). Every other part of the channel's object (src/channel/channel-object.ts) reads and
 * writes through it.
 */

import type { AlarmScheduler } from "../platform/alarm-scheduler";
import type { MessageFields } from "../wire/frame-text";
import { channelTablesExist, createChannelTables } from "./schema";

export type CounterName =
  /** The last seq assigned (0: none yet). */
  | "last_seq"
  | "delivered_total"
  | "dropped_total"
  | "copy_failures_total"
  /** Subscribers (WebSocket or SSE) disconnected for falling too far behind, as relays report them. */
  | "slow_consumers_closed"
  /** Delivery calls made to relays. */
  | "relay_sends_total"
  /** Messages relays skipped for their subscribers' own rates or slowness, as they report them (src/channel/readers.ts). */
  | "readers_skipped_total"
  | "period_delivered"
  | "period_dropped"
  /** Priority messages (never dropped by the throttle): in all, and among this period's and the fast period's delivered. */
  | "priority_total"
  | "period_priority"
  | "fast_priority"
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
  | "fast_decided_at"
  /** A sharded channel's own object: when a shard last joined its registry (src/channel/shard-registry.ts). */
  | "shards_seen_at";

export type CounterValues = Partial<Record<CounterName, number>>;

export class ChannelStore {
  readonly sql: SqlStorage;
  private readonly counters = new Map<CounterName, number>();
  /** The channel's name, once a call named it (stored in `meta`). */
  channel: string | null = null;
  /** Nothing is stored (never written, or deleted by idle expiry); the tables come with the next write. */
  wiped = false;
  /**
   * The channel's epoch (docs/api.md, "Numbering restarts"): made with its tables and kept in `meta`,
   * so a channel whose storage idle expiry deleted numbers its messages from seq 1 again under a new
   * one, and a resume from the old numbering is told. "" while nothing is stored.
   */
  epoch = "";
  /** Messages appended by the current transaction, sent live once it commits. */
  live: MessageFields[] = [];
  /** Inside {@link inBatch}: counters changed but not yet written. */
  private deferred: Set<CounterName> | null = null;

  constructor(
    private readonly storage: DurableObjectStorage,
    /** The object's one alarm: a rolled-back transaction restores its cached time. */
    private readonly scheduler: AlarmScheduler,
    /** Runs `fn` with no other call delivered to the object meanwhile (its `blockConcurrencyWhile`). */
    private readonly exclusive: <T>(fn: () => Promise<T>) => Promise<T>,
  ) {
    this.sql = storage.sql;
  }

  /**
   * Reads what is stored, in the object's `blockConcurrencyWhile`: the counters, and answers the
   * `meta` rows for the parts that keep theirs there (none when nothing is stored).
   */
  load(): Map<string, string> {
    const meta = new Map<string, string>();
    // A channel never written to (a history read or stats of a name nobody used) creates nothing:
    // its tables come with its first write.
    if (!channelTablesExist(this.sql)) {
      this.wiped = true;
      return meta;
    }
    createChannelTables(this.sql);
    for (const row of this.sql.exec<{ name: string; value: number }>("SELECT name, value FROM counters")) {
      this.counters.set(row.name as CounterName, row.value);
    }
    for (const row of this.sql.exec<{ name: string; value: string }>("SELECT name, value FROM meta")) {
      meta.set(row.name, row.value);
    }
    this.channel = meta.get("channel") ?? null;
    // Storage from before epochs existed (local development) gets one.
    this.epoch = meta.get("epoch") ?? this.newEpoch();
    return meta;
  }

  /** Before any use of storage: the tables, if an idle expiry deleted them, under a new epoch. */
  revive(): void {
    if (!this.wiped) return;
    this.wiped = false;
    createChannelTables(this.sql);
    this.epoch = this.newEpoch();
  }

  /**
   * A new epoch, stored: 72 random bits as 12 base64url characters, so a channel never gets one it
   * had before (a stale epoch can never look current again).
   */
  private newEpoch(): string {
    const bytes = crypto.getRandomValues(new Uint8Array(9));
    const epoch = btoa(String.fromCharCode(...bytes))
      .replace(/\+/g, "-")
      .replace(/\//g, "_");
    this.putMeta("epoch", epoch);
    return epoch;
  }

  /** Learns the channel's name from the first call that carries it, and stores it. */
  remember(channel: string): void {
    if (this.channel === null && channel) {
      this.revive();
      this.channel = channel;
      this.putMeta("channel", channel);
      // A channel first used by a subscriber expires from then, like one first used by a publish.
      if (!this.counter("last_publish_at")) this.set({ last_publish_at: Date.now() });
    }
  }

  putMeta(name: string, value: string): void {
    this.sql.exec("INSERT OR REPLACE INTO meta (name, value) VALUES (?, ?)", name, value);
  }

  counter(name: CounterName): number {
    return this.counters.get(name) ?? 0;
  }

  /** Adds `deltas` to counters, and sets `values`, in one write. */
  bump(deltas: CounterValues, values: CounterValues = {}): void {
    const next: CounterValues = { ...values };
    for (const [k, d] of Object.entries(deltas) as [CounterName, number][]) {
      if (d) next[k] = this.counter(k) + d;
    }
    this.set(next);
  }

  set(values: CounterValues): void {
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

  /**
   * Runs `fn` in one transaction with counter writes gathered into one statement at its end: a batch
   * of 100 messages would otherwise write the counters 100 times.
   */
  inBatch(fn: () => void): void {
    const counters = new Map(this.counters);
    const pending = this.live.length;
    const channel = this.channel;
    // An alarm set inside the transaction is undone with it, so the cached time must be too.
    const alarmAt = this.scheduler.setFor;
    try {
      this.storage.transactionSync(() => {
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
      this.live.length = pending;
      this.channel = channel;
      this.scheduler.restore(alarmAt);
      throw e;
    }
  }

  /** The messages appended since the last call, to send live. */
  takeLive(): MessageFields[] {
    const messages = this.live;
    this.live = [];
    return messages;
  }

  /**
   * Deletes everything stored, the alarm included, and answers whether it did. No other call runs
   * while the deletion settles (`blockConcurrencyWhile`), so none can write to tables about to go;
   * memory forgets only once storage did (this store's, and the rest of the object's through
   * `forget`, in the same step). A deletion that failed leaves storage and memory as they
   * were — the channel not deleted — for the caller to try again.
   */
  wipe(forget: () => void): Promise<boolean> {
    return this.exclusive(async () => {
      // The alarm first: deleting it writes the platform's own table, which deleteAll then takes too.
      await this.storage.deleteAlarm().catch(() => undefined);
      try {
        await this.storage.deleteAll();
      } catch (e) {
        console.error("floodgate: could not delete the channel's storage", e instanceof Error ? e.message : e);
        this.scheduler.cleared(); // the alarm is gone: the caller's retry must set it again
        return false;
      }
      this.wiped = true;
      this.scheduler.cleared();
      this.counters.clear();
      this.channel = null;
      this.epoch = "";
      this.live = [];
      forget();
      return true;
    });
  }
}
