/**
 * Coalesces concurrent publishes to one channel from this isolate into one `publishMany` call.
 *
 * A channel's object commits every publish to storage before it answers, and that wait — not the
 * work — is what a publish costs. Publishes for one channel that arrive while its call is in flight
 * go together in one call (one transaction, one commit), through src/coalescer.ts. Order is arrival
 * order in this isolate; each publish gets exactly the outcome it would have had alone (the object
 * decides them one by one, Idempotency-Keys included). A publish with nothing in flight ahead of it
 * waits {@link GATHER_MS} (1 ms) for company first.
 *
 * A publish whose batch never answers within {@link FOLLOWER_PATIENCE_MS} fails (the route answers
 * 503: retry with the same Idempotency-Key) — it never resends by itself, which could deliver twice.
 */
import type { PublishCommand, PublishOutcome } from "./channel-object";
import { Coalescer, LOST } from "./coalescer";

/** How long a batch with nothing ahead of it gathers company before it is sent, in ms. */
export const GATHER_MS = 1;
/** Most publishes in one call. */
const MAX_BATCH = 100;
/** How long a batch waits for the call ahead of it before it is sent regardless. */
export const STALL_MS = 5000;
/** How long a follower waits for its batch's answer before it gives up (503). */
export const FOLLOWER_PATIENCE_MS = 10_000;

type Send = (channel: string, cmds: PublishCommand[]) => Promise<PublishOutcome[]>;
type Answer = { outcome: PublishOutcome } | { error: string };

export class PublishBatcher {
  private readonly batches: Coalescer<PublishCommand, Answer>;
  /** Calls made, for tests and the benchmark. */
  calls = 0;

  constructor(send: Send) {
    this.batches = new Coalescer<PublishCommand, Answer>(
      async (channel, cmds) => {
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
      },
      { maxBatch: MAX_BATCH, gatherMs: GATHER_MS, stallMs: STALL_MS, patienceMs: FOLLOWER_PATIENCE_MS },
    );
  }

  /** Publishes `cmd` in a batch with its channel's concurrent publishes. @throws when the call failed. */
  async publish(cmd: PublishCommand, defer?: (p: Promise<unknown>) => void): Promise<PublishOutcome> {
    const answer = await this.batches.submit(cmd.channel, cmd, defer);
    if (answer === LOST) throw new Error("publish batch got no answer");
    if ("error" in answer) throw new Error(answer.error);
    return answer.outcome;
  }
}
