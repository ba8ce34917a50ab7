/**
 * Coalesces concurrent publishes to one channel from this isolate into one `publishMany` call.
 *
 * A channel's object commits every publish to storage before it answers, and that wait — not the
 * work — is what a publish costs. Publishes for one channel that arrive while its call is in flight
 * go together in one call (one transaction, one commit), through functions/coalescer.ts. Order is
 * arrival order in this isolate; each publish gets exactly the outcome it would have had alone (the
 * object decides them one by one, Idempotency-Keys included). A publish with nothing in flight ahead
 * of it waits `PUBLISH_BATCHING.gatherMs` (1 ms) for company first.
 *
 * A publish whose batch never answers within `PUBLISH_BATCHING.patienceMs` (10 s) fails (the route
 * answers 503: retry with the same Idempotency-Key) — it never resends by itself, which could
 * deliver twice.
 *
 * What waits here is bounded in bytes ({@link PUBLISH_QUEUE_MAX_BYTES}): a publish that would take
 * the isolate's waiting messages past it is refused at once with 503 `unavailable` and `Retry-After`,
 * and counted (docs/api.md, "Bounds").
 */

import type { PublishCommand, PublishOutcome } from "../channel/calls";
import { Coalescer, type CoalescerOptions, LOST } from "../platform/coalescer";
import { unavailable } from "../wire/errors";

/** How publishes to one channel are batched (functions/coalescer.ts, `CoalescerOptions`). */
export const PUBLISH_BATCHING: CoalescerOptions = {
  /** Most publishes in one call. */
  maxBatch: 100,
  /** How long a batch with nothing ahead of it gathers company before it is sent, in ms. */
  gatherMs: 1,
  /** How long a batch waits for the call ahead of it before it is sent regardless, in ms. */
  stallMs: 5000,
  /** How long a follower waits for its batch's answer before it gives up (503), in ms. */
  patienceMs: 10_000,
};
/**
 * Most bytes of messages waiting in one isolate for their batch's answer, all channels together:
 * 8 MiB, 256 of the largest default messages, a small share of an isolate's 128 MB.
 */
export const PUBLISH_QUEUE_MAX_BYTES = 8 * 1024 * 1024;
/** Seconds a publish refused for the byte cap is told to wait: batches answer within milliseconds. */
const OVERFLOW_RETRY_AFTER_S = 1;
/** What one waiting publish costs beyond its message: the command, its slot, its promise. */
const PER_PUBLISH_OVERHEAD_BYTES = 256;

type Send = (channel: string, cmds: PublishCommand[]) => Promise<PublishOutcome[]>;
type Answer = { outcome: PublishOutcome } | { error: string };

export interface PublishBatcherOptions {
  /** Byte cap of waiting publishes; default {@link PUBLISH_QUEUE_MAX_BYTES}. */
  maxBytes?: number;
  /** Called once per publish refused for the byte cap (the route counts it in /metrics). */
  onOverflow?: () => void;
}

export class PublishBatcher {
  private readonly batches: Coalescer<PublishCommand, Answer>;
  private readonly maxBytes: number;
  private readonly onOverflow: () => void;
  /** Bytes of the publishes waiting for an answer now. */
  queuedBytes = 0;
  /** Calls made, for tests and the benchmark. */
  calls = 0;

  constructor(send: Send, opts: PublishBatcherOptions = {}) {
    this.maxBytes = opts.maxBytes ?? PUBLISH_QUEUE_MAX_BYTES;
    this.onOverflow = opts.onOverflow ?? (() => {});
    this.batches = new Coalescer<PublishCommand, Answer>(async (channel, cmds) => {
      try {
        this.calls++;
        // Plain copies: an RPC result belongs to the request that made the call.
        const outcomes = (await send(channel, cmds)).map((o) => ({ ...o }));
        return cmds.map((_, i) => {
          const outcome = outcomes[i];
          return outcome ? { outcome } : { error: "publish batch answered short" };
        });
      } catch (e) {
        // The text only: the error object belongs to the request that made the call.
        const error = e instanceof Error ? e.message : String(e);
        return cmds.map(() => ({ error }));
      }
    }, PUBLISH_BATCHING);
  }

  /**
   * Publishes `cmd` in a batch with its channel's concurrent publishes.
   * @throws ApiError 503 when the isolate's waiting publishes are at their byte cap; Error when the call failed.
   */
  async publish(cmd: PublishCommand, defer?: (p: Promise<unknown>) => void): Promise<PublishOutcome> {
    const bytes = cmd.data.length + (cmd.idempotencyKey?.length ?? 0) + PER_PUBLISH_OVERHEAD_BYTES;
    if (this.queuedBytes + bytes > this.maxBytes) {
      this.onOverflow();
      throw unavailable(
        "publish_overflow",
        "too many publishes are waiting in this server; retry shortly",
        OVERFLOW_RETRY_AFTER_S,
      );
    }
    this.queuedBytes += bytes;
    let answer: Answer | typeof LOST;
    try {
      answer = await this.batches.submit(cmd.channel, cmd, defer);
    } finally {
      this.queuedBytes -= bytes;
    }
    if (answer === LOST) throw new Error("publish batch got no answer");
    if ("error" in answer) throw new Error(answer.error);
    return answer.outcome;
  }
}
