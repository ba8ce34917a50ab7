/**
 * What the Cron sweep decides when it visits one channel (docs/throttling.md, "What the sampler does
 * each run"): whether the visit fits the run's KV budget, whether the channel is skipped, which rate
 * wins, whether `throttleRate:<channel>` must be written, and whether the registry keeps the channel
 * on its throttled list.
 *
 * Pure and platform-neutral: src/worker/sampler/sampler-run.ts reads the channel's counts and KV keys, calls
 * {@link decideVisit}, and writes what it says. The law itself is functions/sampler.ts.
 */
import {
  allowedMessageRate,
  isMeaningfulChange,
  nextDropRate,
  offeredRate,
  type PeriodCounts,
  roundRate,
  type SamplerTarget,
} from "./sampler";

/** Workers KV operations one invocation may make (docs/operations.md, "Sampler limits per run"). */
export const KV_OPERATIONS_PER_RUN = 1000;
/** KV operations one channel's visit may take: a read of its key and perhaps a write (or a delete). */
export const KV_OPERATIONS_PER_VISIT = 2;
/**
 * A shard's visit (functions/shard-key.ts) may also read its channel's key, the rate the shard runs at
 * without a key of its own; one read per channel per run, shared by its shards.
 */
export const KV_OPERATIONS_PER_SHARD_VISIT = 3;
/** KV operations a run makes before any visit: the one read of the global key. */
const KV_OPERATIONS_BEFORE_VISITS = 1;

/**
 * A run's KV operations. Visits run concurrently, so each reserves the most it may take before it
 * starts and gives back what it did not use; a channel that would not fit waits for the next run
 * (its mark stays), so a run never exceeds the platform's cap.
 */
export class KvBudget {
  private left: number;

  constructor(operations: number = KV_OPERATIONS_PER_RUN - KV_OPERATIONS_BEFORE_VISITS) {
    this.left = operations;
  }

  /** Reserves one visit's operations; false when they do not fit (the channel is deferred). */
  reserveVisit(operations: number = KV_OPERATIONS_PER_VISIT): boolean {
    if (this.left < operations) return false;
    this.left -= operations;
    return true;
  }

  /**
   * Gives back what a finished visit did not use of what it reserved. A visit that failed gives
   * nothing back: it may have read or written before it failed, and the cap must hold either way.
   */
  settle(reserved: number, used: number): void {
    this.left += reserved - used;
  }
}

/** What a visit did, as far as KV is concerned. */
export type VisitOutcome = { skipped: SkipReason } | { written: boolean; deleted?: boolean };

/** KV operations a visit made: none when skipped, a read, and a write (or a delete) when it changed the key. */
export function kvOperations(visit: VisitOutcome): number {
  return "written" in visit ? (visit.written || visit.deleted ? 2 : 1) : 0;
}

/** Why a visit touches nothing. */
export type SkipReason = "no target" | "analytics channel";

/**
 * The target a visit samples against, or why the sweep leaves the channel alone. The analytics
 * channel is never throttled, whatever the targets say; a channel without a target keeps whatever
 * rate an operator set.
 */
export function visitTarget<T extends SamplerTarget>(
  isAnalyticsChannel: boolean,
  target: T | null,
): { skipped: SkipReason } | { target: T } {
  if (isAnalyticsChannel) return { skipped: "analytics channel" };
  return target ? { target } : { skipped: "no target" };
}

/**
 * The rate a channel without its own key runs at: the global key when it holds a rate, else the
 * configured fallback.
 */
export function globalRunningRate(storedGlobal: number | null, fallbackRate: number): number {
  return storedGlobal ?? fallbackRate;
}

/**
 * The rate a shard without its own key runs at (functions/before-publish.ts): its channel's key when
 * that holds a rate, else what every channel without a key runs at.
 */
export function shardDefaultRate(storedChannel: number | null, globalRate: number): number {
  return storedChannel ?? globalRate;
}

/** A period as the channel's object hands it to the sweep. */
export interface TakenPeriod {
  counts: PeriodCounts;
  /** When the period began (epoch ms). */
  startedAt: number;
  /** The fast loop's current rate, or null when it has none. */
  fastRate: number | null;
  /** When the fast loop last decided (epoch ms), or null when it never has. */
  fastDecidedAt: number | null;
}

export interface VisitInput {
  target: SamplerTarget;
  period: TakenPeriod;
  /** The channel's own `throttleRate:<channel>`, parsed; null when absent or not a number. */
  storedRate: number | null;
  /**
   * What the channel runs at without its own key: {@link globalRunningRate}, or for a shard
   * {@link shardDefaultRate}.
   */
  defaultRate: number;
}

export interface VisitDecision {
  /** The rate the channel ran at during the period: its own key, else its default rate. */
  currentRate: number;
  /** The rate the channel runs at after the visit. */
  newRate: number;
  /** Whether `newRate` must be written to the channel's key. */
  write: boolean;
  /**
   * Whether the channel's key must be deleted instead: `newRate` is its default, what it runs at
   * without a key, so a released channel leaves no key behind (KV is never listed or swept).
   */
  deleteKey: boolean;
  /** Who decided the rate: the fast loop during the period (the sweep persists it), or the sweep. */
  decidedBy: "fast loop" | "sweep";
  /** Offered messages per second over the period (null: a period with no length). */
  offeredRate: number | null;
  /** Messages per second the target allows at this occupancy (null: unlimited). */
  allowedRate: number | null;
  /** Whether the registry keeps visiting the channel while it is idle, so its rate is released to 0. */
  throttled: boolean;
}

/** Decides one visit of a channel with a target from its period and the rates stored for it. */
export function decideVisit({ target, period, storedRate, defaultRate }: VisitInput): VisitDecision {
  const counts = period.counts;
  // Without its own key the channel runs at its default (the global rate or the fallback; a shard's channel's).
  const current = storedRate ?? defaultRate;
  // The fast loop's rate when it decided during this period (finer and fresher, same law); else the
  // law on this period's counts — a channel whose fast loop did not run, idle ones included.
  const fast = period.fastRate !== null && (period.fastDecidedAt ?? 0) > period.startedAt;
  const next = fast ? roundRate(period.fastRate ?? 0) : roundRate(nextDropRate(counts, current, target));
  const change = needsWrite(storedRate, next, defaultRate);
  const newRate = change ? next : current;
  // A key that holds the default (released to 0, or left from before) is removed rather than kept.
  const deleteKey = storedRate !== null && newRate === defaultRate;
  const write = change && !deleteKey;
  return {
    currentRate: current,
    newRate,
    write,
    deleteKey,
    decidedBy: fast ? "fast loop" : "sweep",
    offeredRate: round3(offeredRate(counts)),
    // Unlimited (a delivery budget with nobody subscribed) shows as null.
    allowedRate: round3(allowedMessageRate(target, counts.occupancy)),
    throttled: newRate > 0,
  };
}

/**
 * Whether the channel's key must hold `next`. Only a meaningful change of the rate the channel runs
 * at is written (KV: one write per second per key, each write billed, a run's operations capped). A
 * new channel under its target that already runs at 0 gets no key; one that its default rate (the
 * global one) would throttle gets its own 0, so the default never throttles a channel under its target.
 */
export function needsWrite(storedRate: number | null, next: number, defaultRate: number): boolean {
  return storedRate === null ? next !== defaultRate : isMeaningfulChange(storedRate, next);
}

/** Three decimals for reports; a non-finite value (no length, unlimited) as null. */
function round3(n: number | null): number | null {
  return n === null || !Number.isFinite(n) ? null : Math.round(n * 1000) / 1000;
}
