/**
 * Ships copies of dropped messages to the analytics channel in batches, off the publish path.
 *
 * Each publish that drops a message enqueues its copy and hands the returned promise to
 * `ctx.waitUntil`, so the response does not wait for it. Copies enqueued within `windowMs` of each
 * other (concurrent publishes in one isolate) travel in one call, at most `maxBatch` per call, so a
 * flood of drops costs a fraction of a call per drop. The promise settles after the batch holding the
 * copy was sent or its failure was reported; it never rejects, so `waitUntil` sees no error.
 *
 * A failed send is reported through `onFailure` (count and log it); the messages stay dropped. When
 * `onFailure` returns a promise the flush waits for it, so work it starts stays inside `waitUntil`.
 * Platform-neutral: the sink and the wait are arguments.
 */
import type { DroppedCopy } from "./before-publish";

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
  /** How long the first copy waits for company, in ms. Default 5. */
  windowMs?: number;
  /** Default: a `setTimeout` promise. */
  wait?: (ms: number) => Promise<void>;
}

export class DropCopyQueue {
  private readonly sink: DropCopySink;
  private readonly onFailure: (batch: QueuedCopy[], error: unknown) => void | Promise<void>;
  private readonly maxBatch: number;
  private readonly windowMs: number;
  private readonly wait: (ms: number) => Promise<void>;
  private pending: QueuedCopy[] = [];
  private flushing: Promise<void> | null = null;

  constructor(opts: DropCopyQueueOptions) {
    this.sink = opts.sink;
    this.onFailure = opts.onFailure;
    this.maxBatch = Math.max(1, opts.maxBatch ?? 100);
    this.windowMs = Math.max(0, opts.windowMs ?? 5);
    this.wait = opts.wait ?? ((ms) => new Promise((resolve) => setTimeout(resolve, ms)));
  }

  /** Copies waiting for the next flush. */
  get size(): number {
    return this.pending.length;
  }

  /** Queues a copy; the promise settles once it has been sent or its failure reported. */
  enqueue(item: QueuedCopy): Promise<void> {
    this.pending.push(item);
    if (!this.flushing) this.flushing = this.flushSoon();
    return this.flushing;
  }

  private async flushSoon(): Promise<void> {
    // Even with no window, yield once so copies enqueued in the same tick travel together.
    if (this.windowMs > 0) await this.wait(this.windowMs);
    else await Promise.resolve();
    // Drain everything queued so far, including copies added while earlier batches were in flight.
    while (this.pending.length > 0) {
      const batch = this.pending.splice(0, this.maxBatch);
      try {
        await this.sink.send(batch);
      } catch (e) {
        await this.onFailure(batch, e);
      }
    }
    // Cleared in the same synchronous step that saw the queue empty, so a copy enqueued from now on
    // starts a new flush instead of joining one that has already finished draining.
    this.flushing = null;
  }
}
