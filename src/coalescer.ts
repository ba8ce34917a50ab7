/**
 * Coalesces concurrent calls for one key from this isolate into one call that decides them all.
 * The limiter gate (one `chargeMany` per bucket key) and the publish batcher (one `publishMany` per
 * channel) are both built on it.
 *
 * While a call for a key is in flight, items arriving for the same key join one open batch, sent as
 * one call once the call ahead returns. A batch with nothing ahead of it waits `gatherMs` for company
 * first. Order is arrival order in this isolate; the call answers each item in that order.
 *
 * The batch is sent by its first item's request (its leader), which hands the work to `defer`
 * (`waitUntil`) so it finishes even if that client disconnects. In workerd, code that continues from a
 * promise another request settles runs in that other request's context, so nobody here awaits one:
 * followers and the next leader check shared state on timers of their own (functions/waiting.ts).
 * A leader stuck behind a call that never answers sends anyway after `stallMs`; a follower with no
 * answer after `patienceMs` gets {@link LOST} (and leaves its batch if that has not gone out yet).
 * What a lost follower does is the caller's choice: the limiter asks alone, a publish fails.
 */
import { pollUntil } from "../functions/waiting";

/** A follower's batch never answered within `patienceMs`. */
export const LOST: unique symbol = Symbol("lost");

export interface CoalescerOptions {
  /** Most items in one call. */
  maxBatch: number;
  /** How long a batch with nothing ahead of it gathers company, in ms. */
  gatherMs: number;
  /** How long a batch waits for the call ahead of it before it is sent regardless, in ms. */
  stallMs: number;
  /** How long a follower waits for its answer before it gets {@link LOST}, in ms. */
  patienceMs: number;
}

/**
 * Sends one batch and answers every item, in order. It must not reject: a failure is an answer
 * (the callers map it to an error value), so every follower hears about it.
 */
export type SendBatch<In, Out> = (key: string, items: In[]) => Promise<Out[]>;

interface Batch<In, Out> {
  /** The leader's item first, then the followers' in arrival order. */
  items: In[];
  /** One per follower: `slots[i]` answers `items[i + 1]`. */
  slots: { answer: Out | null }[];
  closed: boolean;
  /** Set once this batch's call has answered. */
  finished: boolean;
}

interface Lane<In, Out> {
  open: Batch<In, Out> | null;
  /** The newest batch sent or about to be sent; null when nothing is in flight. */
  tail: Batch<In, Out> | null;
}

export class Coalescer<In, Out> {
  private readonly lanes = new Map<string, Lane<In, Out>>();

  constructor(
    private readonly send: SendBatch<In, Out>,
    private readonly opts: CoalescerOptions,
  ) {}

  /** This item's answer, or {@link LOST} for a follower whose batch never answered. */
  submit(key: string, item: In, defer?: (p: Promise<unknown>) => void): Promise<Out | typeof LOST> {
    let lane = this.lanes.get(key);
    if (!lane) {
      lane = { open: null, tail: null };
      this.lanes.set(key, lane);
    }
    const open = lane.open;
    if (open && !open.closed && open.items.length < this.opts.maxBatch) return this.follow(open, item);
    const work = this.lead(key, lane, item);
    defer?.(work.catch(() => {}));
    return work;
  }

  private async follow(batch: Batch<In, Out>, item: In): Promise<Out | typeof LOST> {
    const slot: { answer: Out | null } = { answer: null };
    batch.items.push(item);
    batch.slots.push(slot);
    if (await pollUntil(() => slot.answer !== null, this.opts.patienceMs)) return slot.answer as Out;
    if (!batch.closed) {
      const i = batch.slots.indexOf(slot);
      batch.slots.splice(i, 1);
      batch.items.splice(i + 1, 1);
    }
    return LOST;
  }

  private async lead(key: string, lane: Lane<In, Out>, item: In): Promise<Out> {
    const batch: Batch<In, Out> = { items: [item], slots: [], closed: false, finished: false };
    const ahead = lane.tail;
    lane.open = batch;
    lane.tail = batch;
    try {
      if (ahead) await pollUntil(() => ahead.finished, this.opts.stallMs);
      else await new Promise<void>((r) => setTimeout(r, this.opts.gatherMs));
      batch.closed = true;
      if (lane.open === batch) lane.open = null;
      const answers = await this.send(key, batch.items);
      batch.slots.forEach((slot, i) => {
        slot.answer = answers[i + 1] as Out;
      });
      return answers[0] as Out;
    } finally {
      batch.finished = true;
      if (lane.tail === batch) {
        lane.tail = null;
        if (!lane.open) this.lanes.delete(key);
      }
    }
  }
}
