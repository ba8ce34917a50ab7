/**
 * A channel's lines to its relays and connection hosts (docs/api.md, "Relays"): one ordered line
 * each (./relay-pipe.ts), made on first use — to a relay by its stub, to a connection host
 * (src/connection-host/) by its own, naming the channel in each call since a host serves many — and
 * the count of the calls they made, stored with the channel's counters. All lines together hold at
 * most PIPES_MAX_BYTES (./relay-pipe.ts), the fullest letting go first.
 */
import { countInObject } from "../metrics/object-metrics";
import { connectionHostStub, relayStub } from "../platform/stubs";
import { SUBSCRIBER_MAX_BEHIND_BYTES } from "../relay/bounds";
import { PIPES_MAX_BYTES, PipeBudget, RelayPipe, type RelaySend } from "./relay-pipe";
import { isHostName } from "./relay-registry";
import type { ChannelStore } from "./store";

export class RelayLines {
  /** The line to each active relay (memory only: a new instance starts new lines). */
  private readonly pipes = new Map<string, RelayPipe>();
  /** What all the lines hold together, bounded; frames let go on any line are counted. */
  private readonly budget = new PipeBudget(PIPES_MAX_BYTES, (n) =>
    countInObject("floodgate_relay_frames_shed_total", {}, n),
  );
  /**
   * Relay calls made since they were last stored. Counted in memory and stored with the next publish's
   * counters (in its transaction, at no extra write): a counter write per relay call would cost more
   * than the count is worth. Calls made after the last publish are lost if the object restarts.
   */
  private unsavedSends = 0;

  constructor(
    private readonly store: ChannelStore,
    private readonly env: Env,
  ) {}

  to(name: string): RelayPipe {
    let pipe = this.pipes.get(name);
    if (!pipe) {
      const channel = this.store.channel ?? "";
      const send: RelaySend = isHostName(name)
        ? (frames, head, side) => connectionHostStub(this.env, name).deliver(channel, frames, head, side)
        : (frames, head, side) => relayStub(this.env, name).deliver(frames, head, side);
      pipe = new RelayPipe(
        (frames, head, side) => {
          this.unsavedSends++;
          return send(frames, head, side);
        },
        SUBSCRIBER_MAX_BEHIND_BYTES,
        this.budget,
      );
      this.pipes.set(name, pipe);
    }
    return pipe;
  }

  /** The relay left: its line stops. */
  stop(name: string): void {
    this.pipes.get(name)?.stop();
    this.pipes.delete(name);
  }

  /** Delivery calls made to relays, those not yet stored included. */
  get sendsTotal(): number {
    return this.store.counter("relay_sends_total") + this.unsavedSends;
  }

  /**
   * Inside a publish's transaction: the calls counted since the last one go into `relay_sends_total`.
   * Answers how many, for {@link sendsSaved} once the transaction committed.
   */
  saveSends(): number {
    const n = this.unsavedSends;
    if (n > 0) this.store.bump({ relay_sends_total: n });
    return n;
  }

  /** The transaction that stored `n` calls committed: they are no longer unsaved. */
  sendsSaved(n: number): void {
    this.unsavedSends -= n;
  }

  /** Deleted with everything else (idle expiry): every line stops. */
  clear(): void {
    for (const pipe of this.pipes.values()) pipe.stop();
    this.pipes.clear();
    this.unsavedSends = 0;
  }
}
