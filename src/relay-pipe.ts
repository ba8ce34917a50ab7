/**
 * The channel's delivery line to one relay (docs/api.md, "Relays"): batches go out in seq order, one
 * call at a time, so a relay never sees them reordered; relays are independent, so a slow or failed
 * relay holds up only its own line, never the others nor the publisher (nothing here is awaited on
 * the publish path).
 *
 * What queues behind a call in flight is sent as one call when it returns (coalescing: a relay that
 * takes longer gets bigger, fewer calls). The queue is bounded in bytes: past the bound the oldest
 * frames are let go, and a failed call's frames are not sent again. Neither is lost: every call
 * carries the channel's head seq, so the relay sees the hole and fetches it from the channel's
 * history before it sends anything newer (src/relay.ts, repair). A failed call is followed by a
 * head-only call after a backoff, so a relay learns of a hole even if the channel goes quiet.
 */
import type { LiveFrame } from "./frames";
import { utf8Length } from "./frames";

/** Sends frames (possibly none) and the channel's head seq to the relay. */
export type RelaySend = (frames: LiveFrame[], head: number) => Promise<unknown>;

/** Retries of a failed call before the line waits for the next publish (which carries the head too). */
export const PIPE_MAX_RETRIES = 5;
/** The first retry's delay; each next one doubles it (100 ms … 1.6 s). */
export const PIPE_RETRY_BASE_MS = 100;

export class RelayPipe {
  private queue: LiveFrame[] = [];
  private queuedBytes = 0;
  private inFlight = false;
  /** The relay must be told the head even with no frames: a call failed or frames were let go. */
  private needsHead = false;
  private head = 0;
  private failures = 0;
  private retry: ReturnType<typeof setTimeout> | null = null;
  private stopped = false;
  /** Calls made (sent, whatever their outcome). */
  sent = 0;

  constructor(
    private readonly send: RelaySend,
    private readonly maxQueueBytes: number,
  ) {}

  /** Queues a batch (in seq order after what is queued) and sends it when the line is free. */
  push(frames: LiveFrame[], head: number): void {
    if (this.stopped) return;
    this.head = Math.max(this.head, head);
    for (const f of frames) {
      this.queue.push(f);
      this.queuedBytes += utf8Length(f.text);
    }
    // Past the bound the oldest go (at least the newest frame stays): the relay repairs them.
    while (this.queuedBytes > this.maxQueueBytes && this.queue.length > 1) {
      const gone = this.queue.shift() as LiveFrame;
      this.queuedBytes -= utf8Length(gone.text);
      this.needsHead = true;
    }
    this.pump();
  }

  /** Tells the relay the head without frames (after the channel restarted, say). */
  sync(head: number): void {
    if (this.stopped) return;
    this.head = Math.max(this.head, head);
    this.needsHead = true;
    this.pump();
  }

  /** Whether anything was ever sent or is queued on this line. */
  get used(): boolean {
    return this.sent > 0 || this.queue.length > 0 || this.inFlight;
  }

  /** The relay left: nothing more is sent. */
  stop(): void {
    this.stopped = true;
    this.queue = [];
    this.queuedBytes = 0;
    if (this.retry) clearTimeout(this.retry);
    this.retry = null;
  }

  private pump(): void {
    if (this.stopped || this.inFlight || this.retry) return;
    if (this.queue.length === 0 && !this.needsHead) return;
    const frames = this.queue;
    this.queue = [];
    this.queuedBytes = 0;
    this.needsHead = false;
    this.inFlight = true;
    this.sent++;
    this.send(frames, this.head).then(
      () => {
        this.inFlight = false;
        this.failures = 0;
        this.pump();
      },
      () => {
        this.inFlight = false;
        // The frames are not sent again: the relay repairs them from history once it hears the head.
        this.needsHead = true;
        this.failures++;
        if (this.failures > PIPE_MAX_RETRIES) {
          // Give up until the next publish, whose call carries the head and so the repair.
          this.failures = 0;
          this.needsHead = false;
          this.pump();
          return;
        }
        this.retry = setTimeout(
          () => {
            this.retry = null;
            this.pump();
          },
          PIPE_RETRY_BASE_MS * 2 ** (this.failures - 1),
        );
      },
    );
  }
}
