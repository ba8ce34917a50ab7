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
 * All of a channel's lines together are bounded too ({@link PipeBudget}): past
 * {@link PIPES_MAX_BYTES}, queued or in calls not yet answered, the line holding the most lets its
 * oldest frames go first, repaired the same way. Every frame let go is counted (`onShed`).
 *
 * Side frames (summaries, presence: docs/api.md, "Side frames") ride the same line, after the message
 * frames queued before them. They have no seq, so nothing repairs them: past their own bound
 * ({@link PIPE_SIDE_MAX_BYTES}) the oldest are let go, and a failed call's side frames are lost. Each
 * kind is a periodic report whose next frame supersedes it, so a lost one is corrected by the next.
 */
import { type LiveFrame, type SideFrame, utf8Length } from "../wire/frame-text";

/** Sends frames (possibly none), the channel's head seq and side frames (possibly none) to the relay. */
export type RelaySend = (frames: LiveFrame[], head: number, side: SideFrame[]) => Promise<unknown>;

/**
 * Most bytes of frames all of one channel's lines hold together, queued or in a call not yet
 * answered: each line holds at most a subscriber's 1 MiB, and a channel has as many lines as relays
 * (100 at the shipped `MAX_SUBSCRIBERS` and `RELAY_CAPACITY`, more over many data centres).
 */
export const PIPES_MAX_BYTES = 8 * 1024 * 1024;

/** The bytes all of one channel's lines hold, and which line lets frames go when they are too many. */
export class PipeBudget {
  bytes = 0;
  readonly pipes = new Set<RelayPipe>();

  /** @param onShed frames let go on any line (past its own bound or this one), to count. */
  constructor(
    readonly maxBytes: number = PIPES_MAX_BYTES,
    readonly onShed: (frames: number) => void = () => {},
  ) {}

  /** Over the bound: the lines holding the most queued let their oldest frames go first. */
  relieve(): void {
    while (this.bytes > this.maxBytes) {
      let fullest: RelayPipe | null = null;
      for (const p of this.pipes) if (p.sheddable > (fullest?.sheddable ?? 0)) fullest = p;
      if (!fullest) return; // what is left is in calls on their way, and each line's newest frame
      fullest.shed(this.bytes - this.maxBytes);
    }
  }
}

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
  /** Bytes of frames in the call on its way (counted in the budget until it is answered). */
  private inFlightBytes = 0;
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
    private readonly budget: PipeBudget = new PipeBudget(Number.POSITIVE_INFINITY),
  ) {
    budget.pipes.add(this);
  }

  /** Queued bytes this line could let go (all but its newest frame). */
  get sheddable(): number {
    return this.queue.length > 1 ? this.queuedBytes - utf8Length((this.queue.at(-1) as LiveFrame).text) : 0;
  }

  /** Lets the oldest queued frames go until `bytes` are freed or only the newest is left; the relay repairs them. */
  shed(bytes: number): void {
    let freed = 0;
    let n = 0;
    while (freed < bytes && this.queue.length > 1) {
      const gone = this.queue.shift() as LiveFrame;
      freed += utf8Length(gone.text);
      n++;
    }
    if (n === 0) return;
    this.queuedBytes -= freed;
    this.budget.bytes -= freed;
    this.needsHead = true;
    this.budget.onShed(n);
  }

  /** Queues a batch (in seq order after what is queued) and sends it when the line is free. */
  push(frames: LiveFrame[], head: number): void {
    if (this.stopped) return;
    this.head = Math.max(this.head, head);
    if (this.retry && this.failures > PIPE_QUICK_RETRIES && Date.now() - this.lastCallAt >= PIPE_QUICK_GAP_MS) {
      clearTimeout(this.retry);
      this.retry = null;
    }
    let added = 0;
    for (const f of frames) {
      this.queue.push(f);
      added += utf8Length(f.text);
    }
    this.queuedBytes += added;
    this.budget.bytes += added;
    // Past the bound the oldest go (at least the newest frame stays): the relay repairs them.
    if (this.queuedBytes > this.maxQueueBytes) this.shed(this.queuedBytes - this.maxQueueBytes);
    this.budget.relieve();
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
    this.budget.pipes.delete(this);
    this.budget.bytes -= this.queuedBytes + this.inFlightBytes;
    this.inFlightBytes = 0;
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
    const bytes = this.queuedBytes;
    this.queue = [];
    this.inFlightBytes = bytes;
    this.queuedBytes = 0;
    this.side = [];
    this.sideBytes = 0;
    this.needsHead = false;
    this.inFlight = true;
    this.lastCallAt = Date.now();
    this.sent++;
    const answered = () => {
      if (this.stopped) return; // stop() gave its bytes back
      this.budget.bytes -= bytes;
      this.inFlightBytes = 0;
    };
    this.send(frames, this.head, side).then(
      () => {
        answered();
        this.inFlight = false;
        this.failures = 0;
        this.pump();
      },
      () => {
        answered();
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
