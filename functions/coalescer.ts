/**
 * Coalesces concurrent calls for one key from this isolate into one call that decides them all.
 * The limiter gate (one `chargeMany` per bucket key, src/limiter/limiter-gate.ts), the publish batcher (one
 * `publishMany` per channel, src/worker/publish-batcher.ts) and the queue of analytics copies (one append
 * per batch, functions/drop-copies.ts) are all built on it.
 *
 * While a call for a key is in flight, items arriving for the same key join one open batch, sent as
 * one call once the call ahead returns. A batch with nothing ahead of it waits `gatherMs` for company
 * first (with `gatherAlways`, every batch does, before it waits for the one ahead). Order is arrival
 * order in this isolate; the call answers each item in that order; batches of one key are sent one at
 * a time, in order.
 *
 * Two ways in: {@link Coalescer.submit} waits for the item's answer; {@link Coalescer.post} hands the
 * item over and waits for nothing (its batch's leader sends it). Use one of them per key.
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
 * dead leader's item included (nothing accepted is lost). Posted items have no followers waiting: a
 * batch with no beat for that long takes no new item, and the batch opened behind it sends it first.
 * A leader that was only slow finds its batch sent and waits for its own answer like a follower; a
 * batch is only ever sent once.
 */
import { pollUntil } from "./waiting";

/** A follower's batch never answered within `patienceMs`. */
export const LOST: unique symbol = Symbol("lost");

export interface CoalescerOptions<In = unknown> {
  /** Most items in one call. */
  maxBatch: number;
  /** How long a batch with nothing ahead of it gathers company, in ms. */
  gatherMs: number;
  /** How long a batch waits for the call ahead of it before it is sent regardless, in ms. */
  stallMs: number;
  /** How long a follower waits for its answer before it gets {@link LOST}, in ms. */
  patienceMs: number;
  /** Gather `gatherMs` of company even when a batch is ahead (before waiting for it). Default false. */
  gatherAlways?: boolean;
  /** Called with the items of a batch ahead that did not finish within `stallMs`. */
  onStall?: (items: readonly In[]) => void;
  /** How a batch gathers company; default a `setTimeout` promise. */
  wait?: (ms: number) => Promise<void>;
  /** The clock that times takeovers; default `Date.now`. */
  now?: () => number;
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
  private readonly wait: (ms: number) => Promise<void>;
  private readonly now: () => number;

  constructor(
    private readonly send: SendBatch<In, Out>,
    private readonly opts: CoalescerOptions<In>,
  ) {
    this.wait = opts.wait ?? ((ms) => new Promise<void>((r) => setTimeout(r, ms)));
    this.now = opts.now ?? Date.now;
  }

  /** This item's answer, or {@link LOST} when its batch never answered. */
  submit(key: string, item: In, defer?: (p: Promise<unknown>) => void): Promise<Out | typeof LOST> {
    const lane = this.lane(key);
    const open = this.joinable(lane);
    if (open) return this.follow(key, lane, open, item);
    const work = this.lead(key, lane, item);
    defer?.(work.catch(() => {}));
    return work;
  }

  /**
   * Hands `item` over without waiting for its answer. Returns null when it joined a batch another
   * item opened (that batch's leader sends it); otherwise the work of sending the batch it opened,
   * which settles once that batch was sent and which the caller must keep alive (`waitUntil`).
   * Nobody waits on a posted batch, so nobody takes it over: its leader's request must live.
   */
  post(key: string, item: In): Promise<void> | null {
    const lane = this.lane(key);
    const open = this.joinable(lane);
    if (open) {
      open.items.push(item);
      open.slots.push({ answer: null });
      return null;
    }
    return this.drive(key, lane, this.open(lane, item, { answer: null }), true);
  }

  private lane(key: string): Lane<In, Out> {
    let lane = this.lanes.get(key);
    if (!lane) {
      lane = { open: null, tail: null };
      this.lanes.set(key, lane);
    }
    return lane;
  }

  private joinable(lane: Lane<In, Out>): Batch<In, Out> | null {
    const open = lane.open;
    return open && !open.closed && open.items.length < this.opts.maxBatch && !this.abandoned(open) ? open : null;
  }

  /** Unsent, and whoever was to send it has shown no life for {@link TAKEOVER_MS}: its request died. */
  private abandoned(batch: Batch<In, Out>): boolean {
    return !batch.closed && this.now() - batch.beat > TAKEOVER_MS;
  }

  /** Opens a new batch behind the lane's newest one. */
  private open(lane: Lane<In, Out>, item: In, slot: Slot<Out>): Batch<In, Out> {
    const batch: Batch<In, Out> = {
      items: [item],
      slots: [slot],
      ahead: lane.tail,
      closed: false,
      finished: false,
      beat: this.now(),
    };
    lane.open = batch;
    lane.tail = batch;
    return batch;
  }

  private async follow(key: string, lane: Lane<In, Out>, batch: Batch<In, Out>, item: In): Promise<Out | typeof LOST> {
    const slot: Slot<Out> = { answer: null };
    batch.items.push(item);
    batch.slots.push(slot);
    let takeOver = false;
    await pollUntil(() => {
      if (slot.answer !== null) return true;
      if (!batch.closed && this.now() - batch.beat > TAKEOVER_MS) {
        batch.beat = this.now(); // claimed here, in the same turn: no other follower takes it too
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
    const batch = this.open(lane, item, slot);
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
    if (gather && this.opts.gatherAlways) await this.wait(this.opts.gatherMs);
    let ahead = batch.ahead;
    if (ahead && !ahead.finished) {
      for (;;) {
        const before: Batch<In, Out> = ahead;
        const finished = await pollUntil(() => {
          batch.beat = this.now();
          return before.finished || batch.closed || this.abandoned(before);
        }, this.opts.stallMs);
        if (batch.closed || before.finished) break;
        if (this.abandoned(before)) {
          // Its leader died before sending: this one sends it first (claimed in this turn), then itself.
          before.beat = this.now();
          await this.drive(key, lane, before, false);
          ahead = batch.ahead;
          if (!ahead || ahead.finished) break;
          continue;
        }
        if (!finished) this.opts.onStall?.(before.items);
        break;
      }
    } else if (gather && !this.opts.gatherAlways) {
      await this.wait(this.opts.gatherMs);
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
