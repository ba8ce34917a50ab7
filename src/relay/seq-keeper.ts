/**
 * Where a relay keeps its last sent seq (src/relay/stream.ts, `lastSeq`) between batches: in the
 * attachment of one of its open hibernatable WebSockets (the anchor), not in storage with every batch.
 *
 * Why that is enough. The seq matters only to subscribers still connected after the relay's memory is
 * gone (a frame sent twice, or skipped). The one way that happens is hibernation: an idle relay leaves
 * memory and its hibernatable sockets stay connected — with their attachments, which the runtime keeps
 * with each socket. Everything else dies with the object: SSE streams and token WebSockets (held awake,
 * src/relay/subscribers.ts) keep a relay from hibernating, and a reset disconnects every socket. So the
 * seq lives exactly as long as the sockets it protects, and a batch costs one attachment write instead
 * of a storage commit (the relay's largest cost per batch beside its sends: docs/benchmarks.md).
 *
 * A closing socket stays listed (and readable) until the runtime has run its close event, so when the
 * anchor closes another open socket takes the seq in that same event, before the closed one is let go.
 * Each write carries a generation (the clock, and past the last one), so after hibernation the latest
 * write wins among every socket still listed, also when the seq moved back (a channel that started its
 * numbering again) or an old anchor lingers unanswered in CLOSING.
 */
import { attachment, type HeldSocket } from "./subscribers";

/** `WebSocket.OPEN`. */
const OPEN = 1;

/** A kept seq and the generation it was written with. */
interface Kept {
  seq: number;
  generation: number;
}

export class SeqKeeper {
  /** The socket whose attachment holds the seq; null: none chosen (or none open). */
  private anchor: WebSocket | null = null;
  /** What was last written; kept across a leave, so generations only grow. */
  private kept: Kept | null = null;

  constructor(private readonly ctx: DurableObjectState) {}

  /**
   * After a restart: the seq of the latest write any listed socket holds (`held`: every socket with its
   * attachment, src/relay/subscribers.ts), or null when none holds one.
   */
  recover(held: readonly HeldSocket[]): number | null {
    let latest: Kept | null = null;
    for (const [, a] of held) {
      const at = a?.lastSent;
      if (at && (!latest || at[1] > latest.generation)) latest = { seq: at[0], generation: at[1] };
    }
    this.anchor = null;
    if (latest) this.kept = latest;
    return latest?.seq ?? null;
  }

  /**
   * Keeps `seq` with the sockets: a write only when it moved or its anchor is no longer open (none when
   * no hibernatable socket is open: then nothing survives that could be sent a frame twice).
   */
  keep(seq: number): void {
    const anchor = this.anchor?.readyState === OPEN ? this.anchor : null;
    if (anchor && this.kept?.seq === seq) return;
    const ws = anchor ?? this.ctx.getWebSockets().find((w) => w.readyState === OPEN) ?? null;
    this.anchor = ws;
    if (!ws) return;
    const generation = Math.max(Date.now(), (this.kept?.generation ?? 0) + 1);
    try {
      const a = attachment(ws);
      if (!a) return;
      ws.serializeAttachment({ ...a, lastSent: [seq, generation] });
    } catch {
      this.anchor = null; // closed meanwhile: the next keep chooses another
      return;
    }
    this.kept = { seq, generation };
  }

  /** The relay left its channel: no socket is its anchor any more. */
  reset(): void {
    this.anchor = null;
  }
}
