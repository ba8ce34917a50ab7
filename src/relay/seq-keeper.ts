/**
 * Where a relay keeps its last sent seq (src/relay/stream.ts, `lastSeq`) between batches: in the
 * attachment of one of its open hibernatable WebSockets (the anchor, functions/anchored-seq.ts), not
 * in storage with every batch.
 *
 * Why that is enough. The seq matters only to subscribers still connected after the relay's memory is
 * gone (a frame sent twice, or skipped). The one way that happens is hibernation: an idle relay leaves
 * memory and its hibernatable sockets stay connected — with their attachments, which the runtime keeps
 * with each socket. Everything else dies with the object: SSE streams and token WebSockets (held awake,
 * src/relay/subscribers.ts) keep a relay from hibernating, and a reset disconnects every socket. So the
 * seq lives exactly as long as the sockets it protects, and a batch costs one attachment write instead
 * of a storage commit (the relay's largest cost per batch beside its sends: docs/benchmarks.md). With
 * no hibernatable socket open nothing keeps it: nothing survives that could be sent a frame twice.
 *
 * A closing socket stays listed (and readable) until the runtime has run its close event, so when the
 * anchor closes another open socket takes the seq in that same event, before the closed one is let go.
 */
import { AnchoredSeq } from "../../functions/anchored-seq";
import { attachment, type HeldSocket } from "./subscribers";

/** `WebSocket.OPEN`. */
const OPEN = 1;

/**
 * Open sockets asked before the seq is kept nowhere until the next batch (a write fails only on a socket
 * closed meanwhile, or one without an attachment).
 */
const ANCHOR_TRIES = 8;

export class SeqKeeper {
  private readonly seq: AnchoredSeq<WebSocket>;

  constructor(ctx: DurableObjectState) {
    this.seq = new AnchoredSeq<WebSocket>({
      holds: (ws) => ws.readyState === OPEN,
      candidates: () => ctx.getWebSockets(),
      isOpen: (ws) => ws.readyState === OPEN,
      tries: ANCHOR_TRIES,
      write: (ws, seq, generation) => {
        try {
          const a = attachment(ws);
          if (!a) return false;
          ws.serializeAttachment({ ...a, lastSent: [seq, generation] });
          return true;
        } catch {
          return false; // closed meanwhile: another is asked
        }
      },
      // The old anchor is closing, or its write just failed: the later generation written elsewhere
      // outranks whatever entry it still has, so it is not rewritten.
      drop: () => {},
      fallback: () => false,
      // Past the last written or found (the keeper keeps it across a leave too): generations only grow.
      nextGeneration: () => Math.max(Date.now(), this.seq.generation + 1),
    });
  }

  /**
   * After a restart: the seq of the latest write any listed socket holds (`held`: every socket with its
   * attachment, src/relay/subscribers.ts), or null when none holds one.
   */
  recover(held: readonly HeldSocket[]): number | null {
    let latest: HeldSocket | null = null;
    for (const h of held) {
      const at = h[1]?.lastSent;
      if (at && (!latest || at[1] > (latest[1]?.lastSent?.[1] ?? 0))) latest = h;
    }
    this.seq.reset();
    const at = latest?.[1]?.lastSent;
    if (!latest || !at) return null;
    this.seq.recovered(at[0], at[1], latest[0]);
    return at[0];
  }

  /**
   * Keeps `seq` with the sockets: a write only when it moved or its anchor is no longer open (none when
   * no hibernatable socket is open).
   */
  keep(seq: number): void {
    this.seq.keep(seq);
  }

  /** The relay left its channel: no socket is its anchor any more. */
  reset(): void {
    this.seq.reset();
  }
}
