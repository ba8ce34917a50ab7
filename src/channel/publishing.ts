/**
 * One publish decided inside a channel's batch (src/channel/channel-object.ts, publishMany): delivered
 * (appended) or its drop counted, honouring its `Idempotency-Key` (docs/api.md, POST /v1/publish),
 * and the keys' expiry.
 */
import { splitShardKey } from "../../functions/shard-key";
import type { AlarmScheduler } from "../platform/alarm-scheduler";
import type { PublishCommand, PublishOutcome } from "./calls";
import type { MessageLog } from "./messages";
import type { ChannelStore, CounterValues } from "./store";

/** How long an Idempotency-Key is remembered (docs/api.md, POST /v1/publish). */
export const IDEMPOTENCY_TTL_MS = 10 * 60 * 1000;
/** Idempotency-Key expiry waits at least this long after an alarm, so steady keyed traffic does not make it fire for every key. */
const ALARM_SLACK_MS = 60_000;

export class Publishing {
  /** @param count counts traffic (src/channel/activity.ts): a drop is traffic too. */
  constructor(
    private readonly store: ChannelStore,
    private readonly messages: MessageLog,
    private readonly scheduler: AlarmScheduler,
    private readonly count: (deltas: CounterValues) => void,
  ) {}

  /** Inside the batch's transaction: the outcome `cmd` would have had alone. */
  applyOne(cmd: PublishCommand): PublishOutcome {
    this.store.remember(cmd.channel);
    // Channel-wide, as the API says: a repeat of the key on this channel, by whichever publisher, answers
    // the first result (docs/api.md, POST /v1/publish). Publishers sharing a channel share its keys.
    const idemKey = cmd.idempotencyKey ?? null;
    if (idemKey) {
      const prior = this.store.sql
        .exec<{ result: string }>("SELECT result FROM idempotency WHERE key = ? AND expires_at > ?", idemKey, cmd.now)
        .toArray()[0];
      if (prior) return { ...(JSON.parse(prior.result) as PublishOutcome), replayed: true };
    }
    let outcome: PublishOutcome;
    this.store.set({ last_publish_at: cmd.now });
    if (cmd.action === "drop") {
      this.count({ dropped_total: 1, period_dropped: 1 });
      outcome = { status: "dropped", replayed: false };
    } else {
      const m = this.messages.append(cmd.data, cmd.publisher, cmd.now, undefined, cmd.meta);
      if (cmd.priority) this.count({ priority_total: 1, period_priority: 1 });
      if (cmd.priority) this.messages.markPriority(m.seq);
      // A shard's key (functions/shard-key.ts) answers its channel's name and the shard's.
      const { channel, shard } = splitShardKey(cmd.channel);
      outcome = {
        status: "delivered",
        channel,
        ...(shard === null ? {} : { shard }),
        epoch: this.store.epoch,
        seq: m.seq,
        id: m.id,
        published_at: cmd.now,
        replayed: false,
      };
    }
    if (idemKey) {
      this.store.sql.exec("DELETE FROM idempotency WHERE expires_at <= ?", cmd.now);
      const { replayed: _, ...stored } = outcome;
      this.store.sql.exec(
        "INSERT OR REPLACE INTO idempotency (key, result, expires_at) VALUES (?, ?, ?)",
        idemKey,
        JSON.stringify(stored),
        cmd.now + IDEMPOTENCY_TTL_MS,
      );
    }
    return outcome;
  }

  /** After a batch: the alarm will forget its keys, without waiting for the next keyed publish. */
  scheduleKeyExpiry(cmds: PublishCommand[]): void {
    const keyed = cmds.filter((c) => c.idempotencyKey).map((c) => c.now);
    if (keyed.length > 0) this.scheduler.request(Math.min(...keyed) + IDEMPOTENCY_TTL_MS);
  }

  /** Forgets Idempotency-Keys past their 10 minutes, without waiting for the next keyed publish. */
  expireKeys(now: number): void {
    if (this.store.wiped) return;
    this.store.sql.exec("DELETE FROM idempotency WHERE expires_at <= ?", now);
    const next = this.store.sql.exec<{ at: number | null }>("SELECT MIN(expires_at) AS at FROM idempotency").one().at;
    if (next !== null) this.scheduler.request(Math.max(next, now + ALARM_SLACK_MS));
  }
}
