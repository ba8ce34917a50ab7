/**
 * Ships copies of dropped messages to the analytics channel in batches, off the publish path.
 *
 * Each publish that drops a message enqueues its copy and hands the returned promise to
 * `ctx.waitUntil`, so the response does not wait for it. Copies travel in batches of at most
 * `maxBatch`: a batch waits `windowMs` for company, and while one batch is being sent the next one
 * keeps filling, so a flood of drops costs a small fraction of a call per drop (at 1,000 drops/s and
 * the default 25 ms window, about one call per 25 drops). The promise settles after the batch holding
 * the copy was sent or its failure was reported; it never rejects, so `waitUntil` sees no error.
 *
 * Each batch is sent by the request that opened it, inside that request's `waitUntil`, and a batch
 * only ever waits for the one before it: no request's context has to outlive its own copies, so a
 * long flood never relies on one request staying alive (workerd ends `waitUntil` work after a limit).
 *
 * A failed send is reported through `onFailure` (count and log it); the messages stay dropped. When
 * `onFailure` returns a promise the flush waits for it, so work it starts stays inside `waitUntil`.
 * Platform-neutral: the sink and the wait are arguments.
 */
import type { DroppedCopy } from "./before-publish";
import { pollUntil } from "./waiting";

/** A copy as JSON text, with the original message text spliced in when there is one. */
export function serialiseCopy(item: QueuedCopy): string {
  const { copy, messageJson } = item;
  if (messageJson === undefined) return JSON.stringify(copy);
  return `{"source_channel":${JSON.stringify(copy.source_channel)},"message":${messageJson},"publisher":${JSON.stringify(copy.publisher)},"drop_rate":${JSON.stringify(copy.drop_rate)},"dropped_at":${JSON.stringify(copy.dropped_at)}}`;
}

/** A queued copy and whether its drop was already counted by the source channel. */
export interface QueuedCopy {
  copy: DroppedCopy;
  /** True when the channel's own object already counted this drop (idempotent publishes). */
  counted: boolean;
  /** The message as the publisher sent it (JSON text), kept so no digit is lost on the way. */
  messageJson?: string;
}

export interface DropCopySink {
  /** Sends one batch. Throwing means none of the batch reached the analytics channel. */
  send(batch: QueuedCopy[]): Promise<void>;
}

export interface DropCopyQueueOptions {
  sink: DropCopySink;
  /** Called once per failed batch, with the copies that were not delivered. */
  onFailure: (batch: QueuedCopy[], error: unknown) => void | Promise<void>;
  /** Largest batch per call. Default 100. */
  maxBatch?: number;
  /** How long the first copy of a batch waits for company, in ms. Default 25. */
  windowMs?: number;
  /** Default: a `setTimeout` promise. */
  wait?: (ms: number) => Promise<void>;
  /**
   * Most copies waiting in this isolate (default 10,000). Beyond it a copy is reported to `onFailure`
   * at once instead of queued, so a stalled analytics channel cannot grow memory without bound; the
   * message stays dropped and the failure is counted, as for any failed copy.
   */
  maxQueued?: number;
}

export class DropCopyQueue {
  private readonly sink: DropCopySink;
  private readonly onFailure: (batch: QueuedCopy[], error: unknown) => void | Promise<void>;
  private readonly maxBatch: number;
  private readonly windowMs: number;
  private readonly wait: (ms: number) => Promise<void>;

  /** The batch still accepting copies, if any. */
  private open: { items: QueuedCopy[] } | null = null;
  /** The newest batch opened; the next one is sent after it. */
  private tail: { finished: boolean } = { finished: true };
  private waiting = 0;
  private readonly maxQueued: number;

  constructor(opts: DropCopyQueueOptions) {
    this.sink = opts.sink;
    this.onFailure = opts.onFailure;
    this.maxBatch = Math.max(1, opts.maxBatch ?? 100);
    this.windowMs = Math.max(0, opts.windowMs ?? 25);
    this.maxQueued = Math.max(1, opts.maxQueued ?? 10_000);
    this.wait = opts.wait ?? ((ms) => new Promise((resolve) => setTimeout(resolve, ms)));
  }

  /** Copies waiting to be sent. */
  get size(): number {
    return this.waiting;
  }

  /**
   * Queues a copy. The request that opens a batch gets a promise that settles once the batch was sent
   * or its failure reported, and must hand it to `waitUntil`: it sends the batch. The others' copies
   * travel in that batch, so their promise settles at once — in workerd a request must not wait on
   * work another request does (see functions/waiting.ts).
   */
  enqueue(item: QueuedCopy): Promise<void> {
    if (this.waiting >= this.maxQueued) {
      return Promise.resolve(this.onFailure([item], new Error(`more than ${this.maxQueued} copies waiting`))).then(
        () => {},
        () => {},
      );
    }
    this.waiting++;
    if (this.open && this.open.items.length < this.maxBatch) {
      this.open.items.push(item);
      return Promise.resolve();
    }
    const batch = { items: [item] };
    const ahead = this.tail;
    const state = { finished: false };
    this.open = batch;
    this.tail = state;
    return this.send(batch, ahead).finally(() => {
      state.finished = true;
    });
  }

  private async send(batch: { items: QueuedCopy[] }, ahead: { finished: boolean }): Promise<void> {
    // Even with no window, yield once so copies enqueued in the same tick travel together.
    if (this.windowMs > 0) await this.wait(this.windowMs);
    else await Promise.resolve();
    // One batch at a time, in order; checked on this request's own timers. A batch ahead that never
    // finishes (its request was cut off) holds this one back at most AHEAD_PATIENCE_MS.
    if (!ahead.finished) await pollUntil(() => ahead.finished, AHEAD_PATIENCE_MS);
    if (this.open === batch) this.open = null;
    const items = batch.items;
    this.waiting -= items.length;
    try {
      await this.sink.send(items);
    } catch (e) {
      await this.onFailure(items, e);
    }
  }
}

/** How long a batch waits for the one ahead of it before it is sent anyway. */
const AHEAD_PATIENCE_MS = 5000;
