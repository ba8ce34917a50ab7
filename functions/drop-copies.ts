/**
 * Ships copies of dropped messages to the record (the sink: in the Worker, the drops queue) in
 * batches, off the publish path.
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
 * The batching is functions/coalescer.ts's: copies are posted to it, with nobody waiting for answers.
 *
 * Memory is bounded in bytes: a copy's bytes count from the moment it is queued until the send that
 * carries it has settled, and a copy that would take the queue past `maxBytes` is not kept. It is
 * counted, by source channel, and reported as failed (with the reason "queue full") once the send
 * ahead of it settles — so every copy ends up either sent or reported, and none is lost uncounted.
 *
 * A failed send is reported through `onFailure` (count and log it); the messages stay dropped. When
 * `onFailure` returns a promise the flush waits for it, so work it starts stays inside `waitUntil`.
 * Platform-neutral: the sink and the wait are arguments.
 */
import { Coalescer } from "./coalescer";
import { KeyTally } from "./drop-summary";
import type { RecordCopy } from "./record-batch";
import { shardKey } from "./shard-key";

/** The channel object a copy's drop is counted on: its source channel, or that channel's shard. */
export function copyKey(c: Pick<RecordCopy, "source_channel" | "shard">): string {
  return shardKey(c.source_channel, c.shard);
}

/**
 * A copy of a dropped message waiting to be sent: the record's copy (its id made when the message is
 * dropped, the id its frame gets on the analytics channel and the one a failure log names). The
 * message is kept only as the text the publisher sent (never parsed again, and never also as a parsed
 * value: that would double its memory).
 */
export interface QueuedCopy extends RecordCopy {
  /** True when the channel's own object already counted this drop (idempotent publishes). */
  counted: boolean;
  /**
   * The key the drop counts under in its channel's summary (functions/drop-summary.ts), for a channel
   * with a summary rule; at most 128 characters. Sent with the drop's count, never to the record.
   */
  summary_key?: string;
}

/** A copy as JSON text (the analytics channel's message), the original message text spliced in. */
export function serialiseCopy(
  c: Pick<QueuedCopy, "source_channel" | "shard" | "message" | "publisher" | "drop_rate" | "dropped_at">,
): string {
  return `{"source_channel":${JSON.stringify(c.source_channel)}${c.shard === undefined ? "" : `,"shard":${JSON.stringify(c.shard)}`},"message":${c.message},"publisher":${JSON.stringify(c.publisher)},"drop_rate":${JSON.stringify(c.drop_rate)},"dropped_at":${JSON.stringify(c.dropped_at)}}`;
}

/** What one copy's fields besides the message take in memory, near enough (object, numbers, strings). */
const COPY_OVERHEAD_BYTES = 128;

/** The bytes a queued copy holds: its texts (a character is at most 2 bytes in V8) plus the rest. */
export function copyBytes(c: QueuedCopy): number {
  const text = c.message.length + c.source_channel.length + (c.shard?.length ?? 0) + c.publisher.length + c.id.length;
  return 2 * (text + (c.summary_key?.length ?? 0)) + COPY_OVERHEAD_BYTES;
}

/** Why copies did not reach the sink. */
export type FailureCause = "send failed" | "queue full";

/** Message ids a failure log names per source channel; the rest are counted. */
const IDS_NAMED = 3;

/**
 * Copies that did not reach the sink, counted per source channel, with the first few
 * message ids of each for the log (no message kept).
 */
export class CopyTally {
  /**
   * Per source channel (a shard's key for a shard's drops): copies lost, how many of their drops the
   * channel has not counted yet, some ids, and the summary keys of those uncounted drops that carry
   * one (null: none did).
   */
  readonly byChannel = new Map<string, { copies: number; uncounted: number; ids: string[]; keys: KeyTally | null }>();
  total = 0;

  add(
    c: Pick<QueuedCopy, "source_channel" | "shard" | "counted" | "summary_key"> & { id?: string },
    n = 1,
    ids: string[] = [],
  ): void {
    const key = copyKey(c);
    const e = this.byChannel.get(key) ?? { copies: 0, uncounted: 0, ids: [], keys: null };
    e.copies += n;
    if (!c.counted) {
      e.uncounted += n;
      if (c.summary_key !== undefined) {
        e.keys ??= new KeyTally();
        e.keys.add(c.summary_key, n);
      }
    }
    for (const id of c.id === undefined ? ids : [c.id, ...ids]) if (e.ids.length < IDS_NAMED) e.ids.push(id);
    this.byChannel.set(key, e);
    this.total += n;
  }

  static of(copies: readonly QueuedCopy[]): CopyTally {
    const t = new CopyTally();
    for (const c of copies) t.add(c);
    return t;
  }

  /**
   * `public:a.b (3: id1, id2, id3), public:c.d (1: id4)`, busiest first, at most `max` channels
   * named, each with its first message ids.
   */
  describe(max = 5): string {
    const all = [...this.byChannel].sort((a, b) => b[1].copies - a[1].copies);
    const named = all.slice(0, max).map(([ch, e]) => {
      const more = e.copies > e.ids.length ? ", …" : "";
      return e.ids.length > 0 ? `${ch} (${e.copies}: ${e.ids.join(", ")}${more})` : `${ch} (${e.copies})`;
    });
    if (all.length > max) named.push(`${all.length - max} more channels`);
    return named.join(", ");
  }
}

export interface DropCopySink {
  /**
   * Sends one batch. Throwing means none of the batch was taken; answering copies means those were
   * not (a part the sink refused), and are reported as failed like a thrown batch.
   */
  // biome-ignore lint/suspicious/noConfusingVoidType: a sink that takes every copy answers nothing
  send(batch: QueuedCopy[]): Promise<QueuedCopy[] | undefined | void>;
}

export interface DropCopyQueueOptions {
  sink: DropCopySink;
  /** Called for copies that did not reach the sink: a failed or refused batch, or a full queue. */
  onFailure: (failed: CopyTally, cause: FailureCause, error?: unknown) => void | Promise<void>;
  /**
   * Called for a batch whose send did not settle within {@link AHEAD_PATIENCE_MS}: the request that
   * carried it was most likely cut off (workerd ends `waitUntil` work after a limit), so its copies
   * either reached the sink or were lost, and nothing in this isolate can tell which.
   * They are not failures (that would break dropped = copies + failures when the send did land); the
   * record's own count says which. Default: nothing.
   */
  onUnsettled?: (copies: CopyTally) => void;
  /** Most bytes of copies held in this isolate (see {@link copyBytes}); past it a copy is not kept. */
  maxBytes: number;
  /** Largest batch per call. Default 100. */
  maxBatch?: number;
  /** How long the first copy of a batch waits for company, in ms. Default 25. */
  windowMs?: number;
  /** Default: a `setTimeout` promise. */
  wait?: (ms: number) => Promise<void>;
}

/** The one lane of copies: they all go to the one sink, one batch at a time. */
const LANE = "analytics";

export class DropCopyQueue {
  private readonly onFailure: (failed: CopyTally, cause: FailureCause, error?: unknown) => void | Promise<void>;
  private readonly onUnsettled: (copies: CopyTally) => void;
  private readonly maxBytes: number;
  private readonly batches: Coalescer<QueuedCopy, void>;
  /** Batches whose bytes were let go: sent, or given up on while they were still being sent. */
  private readonly released = new WeakSet<readonly QueuedCopy[]>();
  private held = 0;
  private heldBytes = 0;
  /** Copies turned away because the queue was full, reported when the next send settles. */
  private overflow = new CopyTally();

  constructor(opts: DropCopyQueueOptions) {
    const sink = opts.sink;
    this.onFailure = opts.onFailure;
    this.onUnsettled = opts.onUnsettled ?? (() => {});
    this.maxBytes = Math.max(1, opts.maxBytes);
    const wait = opts.wait ?? ((ms) => new Promise<void>((resolve) => setTimeout(resolve, ms)));
    this.batches = new Coalescer<QueuedCopy, void>(
      async (_lane, items) => {
        try {
          const refused = await sink.send(items);
          if (refused && refused.length > 0) await this.onFailure(CopyTally.of(refused), "send failed");
        } catch (e) {
          await this.onFailure(CopyTally.of(items), "send failed", e);
        } finally {
          this.release(items);
        }
        return [];
      },
      {
        maxBatch: Math.max(1, opts.maxBatch ?? 100),
        gatherMs: Math.max(0, opts.windowMs ?? 25),
        // Each batch waits its window, even behind a send in flight: the next one keeps filling.
        gatherAlways: true,
        // Even with no window, yield once so copies enqueued in the same tick travel together.
        wait: (ms) => (ms > 0 ? wait(ms) : Promise.resolve()),
        // A batch ahead that never finishes (its request was cut off) holds the next one back at most
        // AHEAD_PATIENCE_MS; its bytes are then let go too, so a lost request cannot keep the queue
        // full for ever.
        stallMs: AHEAD_PATIENCE_MS,
        onStall: (items) => {
          if (!this.released.has(items)) this.onUnsettled(CopyTally.of(items));
          this.release(items);
        },
        // Nobody waits for a copy's answer: posted copies have no followers to be patient.
        patienceMs: 0,
      },
    );
  }

  /** Copies held: queued, or in a send that has not settled. */
  get size(): number {
    return this.held;
  }

  /** Bytes of the copies held (see {@link copyBytes}). */
  get bytes(): number {
    return this.heldBytes;
  }

  /**
   * Queues a copy. The request that opens a batch gets a promise that settles once the batch was sent
   * or its failure reported, and must hand it to `waitUntil`: it sends the batch. The others' copies
   * travel in that batch, so their promise settles at once — in workerd a request must not wait on
   * work another request does (see functions/waiting.ts).
   *
   * A copy that would take the queue past `maxBytes` is let go at once and only counted; a send is
   * then always in flight (something is held), and it reports the count when it settles. A copy
   * arriving at an empty queue is always kept, however large.
   */
  enqueue(item: QueuedCopy): Promise<void> {
    const size = copyBytes(item);
    if (this.heldBytes > 0 && this.heldBytes + size > this.maxBytes) {
      this.overflow.add(item);
      return Promise.resolve();
    }
    this.held++;
    this.heldBytes += size;
    const work = this.batches.post(LANE, item);
    return work ? work.finally(() => this.reportOverflow()) : Promise.resolve();
  }

  private release(items: readonly QueuedCopy[]): void {
    if (this.released.has(items)) return;
    this.released.add(items);
    this.held -= items.length;
    for (const item of items) this.heldBytes -= copyBytes(item);
  }

  private async reportOverflow(): Promise<void> {
    if (this.overflow.total === 0) return;
    const turnedAway = this.overflow;
    this.overflow = new CopyTally();
    try {
      await this.onFailure(turnedAway, "queue full");
    } catch {
      // reporting is best effort; the failure handler counts before it does anything that can throw
    }
  }
}

/** How long a batch waits for the one ahead of it before it is sent anyway. */
const AHEAD_PATIENCE_MS = 5000;

/**
 * Logs copies turned away by a full queue at most once per `periodMs`, naming their source channels:
 * a flood past the cap would otherwise log thousands of lines a second. The first turn-away after a
 * quiet period is logged at once; later ones are summed into the next line.
 */
export class OverflowLog {
  private pending = new CopyTally();
  private lastLogAt = Number.NEGATIVE_INFINITY;

  constructor(
    private readonly log: (line: string) => void,
    private readonly periodMs = 10_000,
    private readonly now: () => number = Date.now,
  ) {}

  note(turnedAway: CopyTally): void {
    for (const [ch, e] of turnedAway.byChannel)
      this.pending.add({ source_channel: ch, counted: true }, e.copies, e.ids);
    const now = this.now();
    if (now - this.lastLogAt < this.periodMs) return;
    this.lastLogAt = now;
    const p = this.pending;
    this.pending = new CopyTally();
    this.log(
      `floodgate analytics: ${p.total} dropped-message copies counted as failed: the isolate's copy queue was full (source channels: ${p.describe()})`,
    );
  }
}
