/**
 * A relay's subscribers (src/relay/relay.ts): its hibernatable WebSockets, with what each keeps in
 * its attachment so it survives hibernation, and its SSE streams (src/relay/sse-hub.ts). Which are
 * open, which are still being replayed to, which joined ahead of the relay's last seq, whose each
 * is, and how each is closed.
 */

import type { SideEvent, SideFrame } from "../wire/frame-text";
import { type ReaderRate, rateText } from "./reader-rate";
import type { Slowness } from "./slowness";
import { type SseClient, SseHub } from "./sse-hub";

/** `WebSocket.OPEN`. */
const OPEN = 1;

/**
 * Kept on each WebSocket (survives hibernation): messages up to `floor` are never sent to it live;
 * it is closed at `expiresAt` (epoch ms, its token's `exp`), or never when null (anonymous), and when
 * its token's session `sid` is revoked (src/relay/revocations.ts); it is
 * counted for `client` (src/channel/client-cap.ts); with `batch` it asked for packed frames
 * (`?batch=1`, docs/api.md, "Packed frames"); with `presence` it takes presence frames (`?presence=1`,
 * docs/api.md, "Presence"); with `maxRate` it asked for its own rate, and `slow` is how its relay thins
 * it for reading too slowly (docs/api.md, "Each reader's rate"): what its reader needs after hibernation.
 */
export interface SocketAttachment {
  floor: number;
  expiresAt?: number | null;
  sid?: string;
  client?: string;
  batch?: boolean;
  presence?: boolean;
  /** Its own rate (`?max_rate=`, as src/relay/reader-rate.ts writes it), and its thinning for slowness. */
  maxRate?: string;
  slow?: Slowness;
}

/** A subscriber being replayed to or live. */
export type Subscriber = { ws: WebSocket } | { sse: SseClient };

export class RelaySubscribers {
  readonly hub: SseHub;
  /** WebSockets still being replayed to: not sent live messages until that is done. */
  readonly joining = new Set<WebSocket>();
  /** WebSockets that joined ahead of the relay's last seq (a resume past a batch still on its way). */
  readonly floors = new Map<WebSocket, number>();
  /** Whether each socket asked for packed frames, read once from its attachment (kept there through hibernation). */
  private readonly batchedSockets = new WeakMap<WebSocket, boolean>();
  /**
   * Presence subscribers sent a `state` as of a version, skipping the presence frames up to it (their
   * news is in the state) until a call brings only newer ones.
   */
  private readonly presenceAfter = new Map<WebSocket | SseClient, number>();
  /** Whether each socket takes presence frames, read once from its attachment like `batch`. */
  private readonly presenceSockets = new WeakMap<WebSocket, boolean>();

  /** @param changed a subscriber went (or its count changed): the relay reports to its channel. */
  constructor(
    private readonly ctx: DurableObjectState,
    private readonly changed: () => void,
  ) {
    this.hub = new SseHub(changed);
  }

  /** After a restart: sockets that joined ahead of `lastSeq` keep their floors. */
  restore(lastSeq: number): void {
    for (const ws of this.ctx.getWebSockets()) {
      const a = attachment(ws);
      if (a && a.floor > lastSeq) this.floors.set(ws, a.floor);
    }
  }

  /** A new WebSocket subscriber, held by the relay (hibernatable), not live until its replay is done. */
  acceptSocket(
    floor: number,
    expiresAt: number | null,
    client: string,
    batch: boolean,
    presence = false,
    maxRate: ReaderRate | null = null,
    sid: string | null = null,
  ): { sub: Subscriber; response: Response } {
    const pair = new WebSocketPair();
    const [peer, server] = [pair[0], pair[1]];
    this.ctx.acceptWebSocket(server);
    const kept: SocketAttachment = { floor, expiresAt, client, batch, presence };
    if (maxRate) kept.maxRate = rateText(maxRate);
    if (sid) kept.sid = sid;
    server.serializeAttachment(kept);
    this.batchedSockets.set(server, batch);
    this.presenceSockets.set(server, presence);
    this.joining.add(server);
    return { sub: { ws: server }, response: new Response(null, { status: 101, webSocket: peer }) };
  }

  /**
   * Sockets still open: one this relay closed stays listed until its peer answers the close, which a
   * stalled reader never does, so it must not count as a subscriber nor be sent to.
   */
  sockets(): WebSocket[] {
    return this.ctx.getWebSockets().filter((ws) => ws.readyState === OPEN);
  }

  /** A socket's thinning for slowness changed: kept in its attachment, for after hibernation. */
  keepSlowness(ws: WebSocket, slow: Slowness | null): void {
    const a = attachment(ws);
    if (!a) return;
    const { slow: _, ...rest } = a;
    try {
      ws.serializeAttachment(slow ? { ...rest, slow } : rest);
    } catch {
      // closed meanwhile
    }
  }

  /** The socket asked for packed frames (`?batch=1`). */
  isBatched(ws: WebSocket): boolean {
    let batch = this.batchedSockets.get(ws);
    if (batch === undefined) {
      batch = attachment(ws)?.batch === true;
      this.batchedSockets.set(ws, batch);
    }
    return batch;
  }

  /**
   * Whether a subscriber takes side frames of this kind (docs/api.md, "Side frames"): a summary goes
   * to every subscriber, presence to those that asked for it (`?presence=1`).
   */
  wantsSide(sub: WebSocket | SseClient, event: SideEvent): boolean {
    return event === "summary" || (this.takesPresence(sub) && !this.presenceAfter.has(sub));
  }

  /** The subscriber was sent the presence state as of `version`. */
  presenceSent(sub: WebSocket | SseClient, version: number): void {
    this.presenceAfter.set(sub, version);
  }

  /**
   * Before a call's side frames go out, for the subscribers still skipping old presence frames: one
   * whose call brings only newer ones takes them with everyone from now on; one that gets some older
   * and some newer is answered with the newer ones, to send it alone (it stays out of the call's
   * side frames, and of any held with them for packed sockets, so nothing reaches it twice).
   */
  settlePresence(side: readonly SideFrame[]): [WebSocket | SseClient, SideFrame[]][] {
    if (this.presenceAfter.size === 0) return [];
    const presence = side.filter((f) => f.event === "presence");
    if (presence.length === 0) return [];
    const alone: [WebSocket | SseClient, SideFrame[]][] = [];
    for (const [sub, after] of [...this.presenceAfter]) {
      const open = "send" in sub ? sub.readyState === OPEN : !sub.closed;
      const fresh = presence.filter((f) => (f.version ?? Number.MAX_SAFE_INTEGER) > after);
      if (!open || fresh.length === presence.length) {
        this.presenceAfter.delete(sub);
        continue;
      }
      this.presenceAfter.set(sub, Math.max(after, ...presence.map((f) => f.version ?? 0)));
      if (fresh.length > 0) alone.push([sub, fresh]);
    }
    return alone;
  }

  /** The subscriber asked for presence frames (`?presence=1`). */
  takesPresence(sub: WebSocket | SseClient): boolean {
    if (!("send" in sub)) return sub.presence === true;
    let presence = this.presenceSockets.get(sub);
    if (presence === undefined) {
      presence = attachment(sub)?.presence === true;
      this.presenceSockets.set(sub, presence);
    }
    return presence;
  }

  /** Open subscribers taking presence, told to the channel with each count report. */
  presenceCount(): number {
    let n = 0;
    for (const ws of this.sockets()) if (this.takesPresence(ws)) n++;
    for (const c of this.hub.all) if (c.presence === true) n++;
    return n;
  }

  get count(): number {
    return this.sockets().length + this.hub.size;
  }

  /** Still there to be sent to (not closed meanwhile). */
  isOpen(sub: Subscriber): boolean {
    return "ws" in sub ? sub.ws.readyState === OPEN : !sub.sse.closed;
  }

  /** Open subscriptions per client: the channel's per-client totals follow the relay's real sockets. */
  clientCounts(): [string, number][] {
    const counts = new Map<string, number>();
    const add = (key: string) => counts.set(key, (counts.get(key) ?? 0) + 1);
    for (const ws of this.sockets()) add(attachment(ws)?.client ?? "");
    for (const c of this.hub.all) add(c.client);
    return [...counts];
  }

  /** Floors at or below `lastSeq` are passed: those sockets take every live frame from now on. */
  passFloors(lastSeq: number): void {
    if (this.floors.size > 0) for (const [ws, floor] of this.floors) if (floor <= lastSeq) this.floors.delete(ws);
  }

  /** The frames past a socket's floor (it joined ahead of some of them). */
  pastFloor<F extends { seq: number }>(ws: WebSocket, frames: F[]): F[] {
    const floor = this.floors.get(ws);
    return floor === undefined ? frames : frames.filter((f) => f.seq > floor);
  }

  /** Replayed: the subscriber is sent live messages from now on. */
  goLive(sub: Subscriber, floor: number, upTo: number): void {
    if ("ws" in sub) {
      this.joining.delete(sub.ws);
      if (floor > upTo) this.floors.set(sub.ws, floor);
    } else {
      this.hub.goLive(sub.sse);
    }
  }

  leave(sub: Subscriber, code: number, reason: string): void {
    if ("ws" in sub) this.closeSocket(sub.ws, code, reason);
    else this.hub.end(sub.sse);
  }

  closeSocket(ws: WebSocket, code: number, reason: string): void {
    this.joining.delete(ws);
    this.presenceAfter.delete(ws);
    this.floors.delete(ws);
    try {
      ws.close(code, reason);
    } catch {
      // already closed
    }
    this.changed();
  }

  /**
   * Closes every subscriber (a hole the relay cannot send across). `closed` hears how many before the
   * count report is asked for, so that report carries them.
   */
  closeAll(code: number, reason: string, closed: (n: number) => void): void {
    let n = 0;
    for (const ws of this.sockets()) {
      n++;
      this.joining.delete(ws);
      try {
        ws.close(code, reason);
      } catch {
        // already gone
      }
    }
    for (const client of [...this.hub.all]) {
      n++;
      this.hub.end(client);
    }
    closed(n);
    this.changed();
  }
}

export function attachment(ws: WebSocket): SocketAttachment | null {
  return ws.deserializeAttachment() as SocketAttachment | null;
}
