/**
 * A relay's subscribers (src/relay/relay.ts): its WebSockets, with what each keeps in its attachment
 * (through hibernation), and its SSE streams (src/relay/sse-hub.ts). Which are open, which are still
 * being replayed to, which joined ahead of the relay's last seq, whose each is, and how each is
 * closed.
 *
 * Anonymous WebSockets are hibernatable. One opened with a token is held without hibernation
 * (`accept()`), because the relay must close it at its token's `exp` (or when its session is
 * revoked) from its alarm, and workerd does not finish a close that a Durable Object starts on a
 * hibernatable socket outside that socket's own event: the Close frame goes out, the peer answers
 * it, and the connection stays open — a Node client stays CLOSING with no `close` event, a browser
 * gives up after its own 2 s (scripts/repro/close-outside-event.mjs). A socket held without
 * hibernation closes within milliseconds from anywhere. The cost: a relay holding one cannot
 * hibernate while it is open (docs/scaling.md, "What a token subscription costs").
 */

import type { SideEvent, SideFrame } from "../wire/frame-text";
import { type ReaderRate, rateText } from "./reader-rate";
import type { Slowness } from "./slowness";
import { type SseClient, SseHub } from "./sse-hub";

/** `WebSocket.OPEN`. */
const OPEN = 1;

/** What a subscriber may send to learn its connection is alive, and the answer (docs/api.md, "Subscribing"). */
export const PING = "ping";
export const PONG = "pong";

/**
 * What the relay does when a socket held without hibernation speaks, closes or fails: the runtime
 * tells it of hibernatable ones through webSocketMessage / webSocketClose / webSocketError instead.
 */
export interface SocketEvents {
  spoke(ws: WebSocket): void;
  closed(ws: WebSocket, code: number): void;
  failed(ws: WebSocket): void;
}

/** The attachments of sockets held without hibernation (serializeAttachment is the hibernation API's). */
const keptInMemory = new WeakMap<WebSocket, SocketAttachment>();

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
  /** On one socket only: the relay's last sent seq and its write's generation (src/relay/seq-keeper.ts). */
  lastSent?: [seq: number, generation: number];
}

/** A hibernatable socket and its attachment, as a restart reads them. */
export type HeldSocket = [ws: WebSocket, attachment: SocketAttachment | null];

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

  /** Token subscribers' sockets, held without hibernation (see above). */
  private readonly awake = new Set<WebSocket>();

  /**
   * @param changed a subscriber went (or its count changed): the relay reports to its channel.
   * @param events what the relay does when a socket held without hibernation speaks, closes or fails.
   */
  constructor(
    private readonly ctx: DurableObjectState,
    private readonly changed: () => void,
    private readonly events: SocketEvents,
  ) {
    this.hub = new SseHub(changed);
  }

  /** After a restart: every socket it holds with its attachment, read once for all a restart restores. */
  held(): HeldSocket[] {
    return this.ctx.getWebSockets().map((ws) => [ws, attachment(ws)]);
  }

  /** After a restart: sockets that joined ahead of `lastSeq` keep their floors. */
  restore(lastSeq: number, held: readonly HeldSocket[]): void {
    for (const [ws, a] of held) if (a && a.floor > lastSeq) this.floors.set(ws, a.floor);
  }

  /**
   * A new WebSocket subscriber, held by the relay (hibernatable unless it has an expiry), not live
   * until its replay is done.
   */
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
    const kept: SocketAttachment = { floor, expiresAt, client, batch, presence };
    if (maxRate) kept.maxRate = rateText(maxRate);
    if (sid) kept.sid = sid;
    if (expiresAt === null) {
      this.ctx.acceptWebSocket(server);
      server.serializeAttachment(kept);
    } else {
      this.holdAwake(server, kept);
    }
    this.batchedSockets.set(server, batch);
    this.presenceSockets.set(server, presence);
    this.joining.add(server);
    return { sub: { ws: server }, response: new Response(null, { status: 101, webSocket: peer }) };
  }

  /** Accepts a socket without hibernation; its events go where the runtime's would (SocketEvents). */
  private holdAwake(ws: WebSocket, kept: SocketAttachment): void {
    ws.accept();
    keptInMemory.set(ws, kept);
    this.awake.add(ws);
    ws.addEventListener("message", (event) => {
      // What setWebSocketAutoResponse does for hibernatable sockets (src/relay/relay.ts).
      if (event.data === PING) {
        try {
          ws.send(PONG);
        } catch {
          // closed meanwhile
        }
      } else this.events.spoke(ws);
    });
    ws.addEventListener("close", (event) => {
      this.awake.delete(ws);
      this.events.closed(ws, event.code);
    });
    ws.addEventListener("error", () => {
      this.awake.delete(ws);
      this.events.failed(ws);
    });
  }

  /**
   * Sockets still open: one this relay closed stays listed until its peer answers the close, which a
   * stalled reader never does, so it must not count as a subscriber nor be sent to.
   */
  sockets(): WebSocket[] {
    const held = this.ctx.getWebSockets();
    return (this.awake.size === 0 ? held : [...held, ...this.awake]).filter((ws) => ws.readyState === OPEN);
  }

  /** A socket's thinning for slowness changed: kept in its attachment, for after hibernation. */
  keepSlowness(ws: WebSocket, slow: Slowness | null): void {
    const a = attachment(ws);
    if (!a) return;
    const { slow: _, ...rest } = a;
    const kept = slow ? { ...rest, slow } : rest;
    if (keptInMemory.has(ws)) {
      keptInMemory.set(ws, kept);
      return;
    }
    try {
      ws.serializeAttachment(kept);
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
  return keptInMemory.get(ws) ?? (ws.deserializeAttachment() as SocketAttachment | null);
}
