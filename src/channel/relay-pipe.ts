import { type LiveFrame, type SideFrame, utf8Length } from "../wire/frame-text";
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
 * history before it sends anything newer (src/relay/stream.ts, repair). A failed call is followed by
 * head-only calls with a growing backoff (capped at {@link PIPE_RETRY_MAX_MS}) until one succeeds or
 * the relay leaves, so a relay learns of a hole even if the channel goes quiet: the last message of
 * an event is not held back until a next publish that may never come.
 *
 * Side frames (summaries, presence: docs/api.md, "Side frames") ride the same line, after the message
 * frames queued before them. They have no seq, so nothing repairs them: past their own bound
 * ({@link PIPE_SIDE_MAX_BYTES}) the oldest are let go, and a failed call's side frames are lost. Each
 * kind is a periodic report whose next frame supersedes it, so a lost one is corrected by the next.
 */

/** Sends frames (possibly none), the channel's head seq and side frames (possibly none) to the relay. */
export type RelaySend = (frames: LiveFrame[], head: number, side: SideFrame[]) => Promise<unknown>;

/** Most bytes of side frames queued on one line while a call is in flight or retried. */
export const PIPE_SIDE_MAX_BYTES = 256 * 1024;

/**
 * Retries after which a new batch no longer waits out the whole backoff: it is sent at once (carrying
 * the head), as a relay that was down for a while may be back, while the timer goes on for a quiet
 * channel — but at most once per {@link PIPE_QUICK_GAP_MS}, so a relay that keeps failing is not
 * called once per publish.
 */
export const PIPE_QUICK_RETRIES = 5;
/** Least time between two calls to a failing relay that a new batch brings forward. */
export const PIPE_QUICK_GAP_MS = 1_600;
/** The first retry's delay; each next one doubles it, up to {@link PIPE_RETRY_MAX_MS}. */
export const PIPE_RETRY_BASE_MS = 100;
/** The longest wait between two retries: a relay down for long costs one call per this. */
export const PIPE_RETRY_MAX_MS = 30_000;

export class RelayPipe {
  private queue: LiveFrame[] = [];
  private queuedBytes = 0;
  private side: SideFrame[] = [];
  private sideBytes = 0;
  private inFlight = false;
  /** The relay must be told the head even with no frames: a call failed or frames were let go. */
  private needsHead = false;
  private head = 0;
  private failures = 0;
  private retry: ReturnType<typeof setTimeout> | null = null;
  private lastCallAt = 0;
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
    if (this.retry && this.failures > PIPE_QUICK_RETRIES && Date.now() - this.lastCallAt >= PIPE_QUICK_GAP_MS) {
      clearTimeout(this.retry);
      this.retry = null;
    }
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

  /** Queues side frames behind what is queued; sent with the next call. */
  pushSide(frames: SideFrame[]): void {
    if (this.stopped) return;
    for (const f of frames) {
      this.side.push(f);
      this.sideBytes += utf8Length(f.text);
    }
    while (this.sideBytes > PIPE_SIDE_MAX_BYTES && this.side.length > 1) {
      const gone = this.side.shift() as SideFrame;
      this.sideBytes -= utf8Length(gone.text);
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
    this.side = [];
    this.sideBytes = 0;
    if (this.retry) clearTimeout(this.retry);
    this.retry = null;
  }

  private pump(): void {
    if (this.stopped || this.inFlight || this.retry) return;
    if (this.queue.length === 0 && this.side.length === 0 && !this.needsHead) return;
    const frames = this.queue;
    const side = this.side;
    this.queue = [];
    this.queuedBytes = 0;
    this.side = [];
    this.sideBytes = 0;
    this.needsHead = false;
    this.inFlight = true;
    this.lastCallAt = Date.now();
    this.sent++;
    this.send(frames, this.head, side).then(
      () => {
        this.inFlight = false;
        this.failures = 0;
        this.pump();
      },
      () => {
        this.inFlight = false;
        if (this.stopped) return;
        // The frames are not sent again: the relay repairs them from history once it hears the head
        // (side frames are lost: the next of their kind supersedes them).
        this.needsHead = true;
        this.failures++;
        this.retry = setTimeout(
          () => {
            this.retry = null;
            this.pump();
          },
          Math.min(PIPE_RETRY_MAX_MS, PIPE_RETRY_BASE_MS * 2 ** Math.min(this.failures - 1, 20)),
        );
      },
    );
  }
}
