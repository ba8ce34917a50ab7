/**
 * One pass of sends to a relay's sockets (src/relay/stream.ts): what the pass tallies, one socket's
 * sends under the per-subscriber byte bound, and what is built once per pass and shared — which side
 * frames each subscriber takes ({@link SideCut}) and the packed texts of a call ({@link PackedOnce}).
 */
import { INTERNAL_CLOSE } from "../wire/close-codes";
import { type LiveFrame, packFrames, type SideEvent, type SideFrame } from "../wire/frame-text";
import { SocketBacklog } from "./memory";
import { THIN_AT_BYTES } from "./slowness";
import type { SseClient } from "./sse-hub";
import type { RelaySubscribers } from "./subscribers";

/** What one pass of sends found: sockets closed as slow, sockets whose send failed. */
export interface SendTally {
  slow: number;
  closed: number;
  /** A pass over every open WebSocket: what each has waiting, for the memory bound. */
  backlog: SocketBacklog;
  /**
   * Subscribers past half the byte bound after the pass, with their backlog: each is thinned (or, at
   * 1/s and still over the bound, closed) after the pass (src/relay/thinned-stream.ts).
   */
  over: { sub: WebSocket | SseClient; bytes: number }[];
}

/** A tally for a pass over every open WebSocket. */
export function newTally(): SendTally {
  return { slow: 0, closed: 0, backlog: new SocketBacklog(), over: [] };
}

/**
 * Runs one socket's sends; one whose send fails is dropped. Sends do not block: a stalled reader's
 * bytes wait in its socket, and one past half the bound is thinned after the pass, so it never slows
 * the others and is closed only if it still overflows at 1 message a second.
 */
export function sendTo(ws: WebSocket, tally: SendTally, send: () => void): void {
  try {
    send();
    const waiting = ws.bufferedAmount;
    tally.backlog.add(ws, waiting);
    if (waiting > THIN_AT_BYTES) tally.over.push({ sub: ws, bytes: waiting });
  } catch {
    // A socket whose send fails is dropped without disturbing the others.
    tally.closed++;
    try {
      ws.close(INTERNAL_CLOSE, "send failed");
    } catch {
      // already gone
    }
  }
}

/** A socket sent nothing in a pass: its backlog still counts for the memory bound, and is still looked at. */
export function tallyWaiting(ws: WebSocket, tally: SendTally, bytes = ws.bufferedAmount): void {
  tally.backlog.add(ws, bytes);
  if (bytes > THIN_AT_BYTES) tally.over.push({ sub: ws, bytes });
}

/** The kinds of side frame, in the order of their bits in a {@link SideCut} mask. */
const SIDE_EVENTS: readonly SideEvent[] = ["summary", "presence"];

/**
 * Which of a call's side frames each subscriber takes, as a mask over their kinds: subscribers that
 * take the same kinds share one list, one packing and one SSE chunk.
 */
export class SideCut {
  private readonly byMask = new Map<number, readonly SideFrame[]>();
  constructor(
    private readonly side: readonly SideFrame[],
    private readonly subs: RelaySubscribers,
  ) {}

  mask(sub: WebSocket | SseClient): number {
    if (this.side.length === 0) return 0;
    let m = 0;
    for (let i = 0; i < SIDE_EVENTS.length; i++) if (this.subs.wantsSide(sub, SIDE_EVENTS[i] as SideEvent)) m |= 1 << i;
    return m;
  }

  frames(mask: number): readonly SideFrame[] {
    if (mask === 0) return [];
    let list = this.byMask.get(mask);
    if (!list) {
      list = this.side.filter((f) => (mask & (1 << SIDE_EVENTS.indexOf(f.event))) !== 0);
      this.byMask.set(mask, list);
    }
    return list;
  }

  framesFor(sub: WebSocket | SseClient): readonly SideFrame[] {
    return this.frames(this.mask(sub));
  }
}

/** The packed texts of a call's frames and side frames, joined once per set of side frames. */
export class PackedOnce {
  private readonly packed = new Map<number, string[]>();
  constructor(
    private readonly frames: readonly LiveFrame[],
    readonly cut: SideCut,
    private readonly maxBytes: number,
  ) {}
  texts(mask: number): string[] {
    let texts = this.packed.get(mask);
    if (!texts) {
      const side = this.cut.frames(mask);
      texts = packFrames(side.length > 0 ? [...this.frames, ...side] : this.frames, this.maxBytes);
      this.packed.set(mask, texts);
    }
    return texts;
  }
}
