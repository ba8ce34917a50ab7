/**
 * Coalesces concurrent publishes to one channel from this isolate into one `publishMany` call.
 *
 * A channel's object commits every publish to storage before it answers, and that wait — not the
 * work — is what a publish costs. While one call for a channel is in flight, publishes arriving for
 * the same channel join one open batch, sent as one call (one transaction, one commit) once the call
 * ahead returns. Order is arrival order in this isolate; each publish gets exactly the outcome it
 * would have had alone (the object decides them one by one, Idempotency-Keys included). A publish with
 * nothing in flight ahead of it waits {@link GATHER_MS} (1 ms) for company first.
 *
 * The batch is sent by its first publish (its leader) under that request's `waitUntil`, so it
 * completes even if that client disconnects. Nobody awaits a promise another request settles
 * (functions/waiting.ts): followers and the next leader check shared state on timers of their own.
 * A follower with no answer within {@link FOLLOWER_PATIENCE_MS} fails (the route answers 503: retry
 * with the same Idempotency-Key) — it never resends by itself, which could deliver twice.
 */
import { pollUntil } from "../functions/waiting";
import type { PublishCommand, PublishOutcome } from "./channel-object";

/** How long a batch with nothing ahead of it gathers company before it is sent, in ms. */
export const GATHER_MS = 1;

/** Most publishes in one call. */
const MAX_BATCH = 100;
/** How long a batch waits for the call ahead of it before it is sent regardless. */
export const STALL_MS = 5000;
/** How long a follower waits for its batch's answer before it gives up (503). */
export const FOLLOWER_PATIENCE_MS = 10_000;

type Send = (channel: string, cmds: PublishCommand[]) => Promise<PublishOutcome[]>;

interface Slot {
  outcome: PublishOutcome | null;
  error: string | null;
}

interface Batch {
  cmds: PublishCommand[];
  /** Position i + 1 in `cmds`. */
  followers: Slot[];
  closed: boolean;
  finished: boolean;
}

interface Lane {
  open: Batch | null;
  tail: Batch | null;
}

export class PublishBatcher {
  private readonly lanes = new Map<string, Lane>();
  /** Calls made, for tests and the benchmark. */
  calls = 0;

  constructor(private readonly send: Send) {}

  publish(cmd: PublishCommand, defer?: (p: Promise<unknown>) => void): Promise<PublishOutcome> {
    let lane = this.lanes.get(cmd.channel);
    if (!lane) {
      lane = { open: null, tail: null };
      this.lanes.set(cmd.channel, lane);
    }
    const open = lane.open;
    if (open && !open.closed && open.cmds.length < MAX_BATCH) return this.follow(open, cmd);
    const work = this.lead(lane, cmd);
    defer?.(work.catch(() => {}));
    return work;
  }

  private async follow(batch: Batch, cmd: PublishCommand): Promise<PublishOutcome> {
    const slot: Slot = { outcome: null, error: null };
    batch.cmds.push(cmd);
    batch.followers.push(slot);
    const answered = await pollUntil(() => slot.outcome !== null || slot.error !== null, FOLLOWER_PATIENCE_MS);
    if (!answered) throw new Error("publish batch got no answer");
    if (slot.error !== null) throw new Error(slot.error);
    return slot.outcome as unknown as PublishOutcome;
  }

  private async lead(lane: Lane, cmd: PublishCommand): Promise<PublishOutcome> {
    const batch: Batch = { cmds: [cmd], followers: [], closed: false, finished: false };
    const ahead = lane.tail;
    lane.open = batch;
    lane.tail = batch;
    try {
      if (ahead) await pollUntil(() => ahead.finished, STALL_MS);
      else await new Promise<void>((r) => setTimeout(r, GATHER_MS)); // publishes arriving meanwhile join
      batch.closed = true;
      if (lane.open === batch) lane.open = null;
      let outcomes: PublishOutcome[];
      try {
        this.calls++;
        // Plain copies: an RPC result belongs to the request that made the call.
        outcomes = (await this.send(cmd.channel, batch.cmds)).map((o) => ({ ...o }));
      } catch (e) {
        const text = e instanceof Error ? e.message : String(e);
        for (const slot of batch.followers) slot.error = text;
        throw e;
      }
      batch.followers.forEach((slot, i) => {
        const o = outcomes[i + 1];
        if (o) slot.outcome = o;
        else slot.error = "publish batch answered short";
      });
      const own = outcomes[0];
      if (!own) throw new Error("publish batch answered short");
      return own;
    } finally {
      batch.finished = true;
      if (lane.tail === batch) {
        lane.tail = null;
        if (!lane.open) this.lanes.delete(cmd.channel);
      }
    }
  }
}
