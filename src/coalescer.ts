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
 *
 * A leader whose request dies before it sends (its timers never fire again) must not strand its
 * followers: whoever waits on a batch shows it is alive on every check (`beat`), and a follower that
 * sees a batch unsent with no beat for {@link TAKEOVER_MS} takes it over and sends it itself, the
 * dead leader's item included (nothing accepted is lost). A leader that was only slow finds its batch
 * sent and waits for its own answer like a follower; a batch is only ever sent once.
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

/** How long a batch may go unsent with nobody showing life before a follower takes it over, in ms. */
export const TAKEOVER_MS = 200;

interface Slot<Out> {
  answer: Out | null;
}

interface Batch<In, Out> {
  /** The leader's item first, then the followers' in arrival order. */
  items: In[];
  /** `slots[i]` answers `items[i]`. */
  slots: Slot<Out>[];
  /** The batch sent before this one, which must finish (or stall) first. */
  ahead: Batch<In, Out> | null;
  /** Taken for sending: no item joins or leaves any more. */
  closed: boolean;
  /** Set once this batch's call has answered. */
  finished: boolean;
  /** `Date.now()` when whoever will send this batch last showed life. */
  beat: number;
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

  /** This item's answer, or {@link LOST} when its batch never answered. */
  submit(key: string, item: In, defer?: (p: Promise<unknown>) => void): Promise<Out | typeof LOST> {
    let lane = this.lanes.get(key);
    if (!lane) {
      lane = { open: null, tail: null };
      this.lanes.set(key, lane);
    }
    const open = lane.open;
    if (open && !open.closed && open.items.length < this.opts.maxBatch) return this.follow(key, lane, open, item);
    const work = this.lead(key, lane, item);
    defer?.(work.catch(() => {}));
    return work;
  }

  private async follow(key: string, lane: Lane<In, Out>, batch: Batch<In, Out>, item: In): Promise<Out | typeof LOST> {
    const slot: Slot<Out> = { answer: null };
    batch.items.push(item);
    batch.slots.push(slot);
    let takeOver = false;
    await pollUntil(() => {
      if (slot.answer !== null) return true;
      if (!batch.closed && Date.now() - batch.beat > TAKEOVER_MS) {
        batch.beat = Date.now(); // claimed here, in the same turn: no other follower takes it too
        takeOver = true;
        return true;
      }
      return false;
    }, this.opts.patienceMs);
    if (takeOver) {
      await this.drive(key, lane, batch, false);
      // Its leader woke up and sent it after all: the answer comes from that call.
      if (slot.answer === null) await pollUntil(() => slot.answer !== null, this.opts.patienceMs);
    }
    if (slot.answer !== null) return slot.answer;
    if (!batch.closed) {
      const i = batch.slots.indexOf(slot);
      batch.slots.splice(i, 1);
      batch.items.splice(i, 1);
    }
    return LOST;
  }

  private async lead(key: string, lane: Lane<In, Out>, item: In): Promise<Out | typeof LOST> {
    const slot: Slot<Out> = { answer: null };
    const batch: Batch<In, Out> = {
      items: [item],
      slots: [slot],
      ahead: lane.tail,
      closed: false,
      finished: false,
      beat: Date.now(),
    };
    lane.open = batch;
    lane.tail = batch;
    await this.drive(key, lane, batch, true);
    if (slot.answer !== null) return slot.answer;
    // Taken over while this leader was slow: its answer comes from whoever sent.
    return (await pollUntil(() => slot.answer !== null, this.opts.patienceMs)) ? (slot.answer as Out) : LOST;
  }

  /**
   * Waits for the batch ahead (or, for a new leader with nothing ahead, `gatherMs` of company),
   * then sends `batch` and answers every slot — unless someone else took it for sending meanwhile.
   */
  private async drive(key: string, lane: Lane<In, Out>, batch: Batch<In, Out>, gather: boolean): Promise<void> {
    const ahead = batch.ahead;
    if (ahead && !ahead.finished) {
      await pollUntil(() => {
        batch.beat = Date.now();
        return ahead.finished || batch.closed;
      }, this.opts.stallMs);
    } else if (gather) {
      await new Promise<void>((r) => setTimeout(r, this.opts.gatherMs));
    }
    if (batch.closed) return;
    batch.closed = true;
    if (lane.open === batch) lane.open = null;
    try {
      const answers = await this.send(key, batch.items);
      batch.slots.forEach((slot, i) => {
        slot.answer = answers[i] as Out;
      });
    } finally {
      batch.finished = true;
      batch.ahead = null;
      if (lane.tail === batch) {
        lane.tail = null;
        if (!lane.open) this.lanes.delete(key);
      }
    }
  }
}
