/**
 * One platform alarm serving several deadlines. A Durable Object has a single alarm, but a channel
 * keeps several deadlines (idempotency expiry, the record's retention, idle expiry, the fast loop,
 * relay wake-ups) and a limiter shard keeps one per full bucket. Each job asks for its time with
 * {@link AlarmScheduler.request}; the earliest wins, and a job woken early simply asks again.
 *
 * The time the alarm is set for is cached in memory, so asking costs no storage call when an earlier
 * alarm is already set (the common case on a hot path: every publish asks).
 */

/** How long past its time a cached alarm may be before it is set again (see {@link AlarmScheduler.request}). */
export const ALARM_LOST_MS = 60_000;

export class AlarmScheduler {
  /** When the alarm is set for, as this instance set or read it; null when none is set. */
  private at: number | null = null;

  /**
   * @param storage the object's storage, whose alarm this schedules.
   * @param owner what the object is, for the log line of a failed set ("the channel's alarm").
   */
  constructor(
    private readonly storage: DurableObjectStorage,
    private readonly owner: string,
  ) {}

  /** Reads the stored alarm; call once, in the object's `blockConcurrencyWhile`. */
  async load(): Promise<void> {
    this.at = await this.storage.getAlarm();
  }

  /** The time the alarm is set for, as far as this instance knows (null: none). */
  get setFor(): number | null {
    return this.at;
  }

  /** The alarm fired: its time is spent, and each job now asks for its next one. */
  fired(): void {
    this.at = null;
  }

  /** The alarm was deleted with everything else (`deleteAll`): nothing is set. */
  cleared(): void {
    this.at = null;
  }

  /**
   * Restores the cached time to what it was before a transaction that rolled back: an alarm set
   * inside a `transactionSync` is undone with it, so the cache must be too.
   */
  restore(at: number | null): void {
    this.at = at;
  }

  /**
   * Sets the alarm for `at`, unless it is already set for an earlier time: an earlier alarm is never
   * pushed later, so no job's time is missed. A time that is not finite asks for nothing.
   */
  request(at: number): void {
    if (!Number.isFinite(at) || at >= Number.MAX_SAFE_INTEGER) return;
    // A cached time long past is an alarm that was lost (a runtime that fires an alarm clears the
    // cache first, in fired()): set it again rather than trust it.
    const lost = this.at !== null && this.at < Date.now() - ALARM_LOST_MS;
    if (this.at !== null && this.at <= at && !lost) return;
    this.at = at;
    this.storage.setAlarm(at).catch((e: unknown) => {
      this.at = null; // the next request tries again
      console.error(`floodgate: could not set ${this.owner}`, e instanceof Error ? e.message : e);
    });
  }
}
