/**
 * A connection host's Pusher connections (./connection-host.ts): hibernatable WebSockets, each with
 * what its attachment keeps through hibernation — its socket id, whose it is, its continent, whether
 * it may make public reads only, when it last spoke and whether the server is waiting for its pong.
 * Its subscriptions are in the host's tables (./schema.ts), since an attachment holds at most 2 KiB.
 */

/** `WebSocket.OPEN`. */
const OPEN = 1;

export interface ConnectionAttachment {
  /** Its socket id (`<digits>.<digits>`). */
  id: string;
  /** Whose connection (src/channel/client-cap.ts `clientKey`). */
  client: string;
  continent: string | null;
  /** Public reads only (a page on an origin admitted only by `CORS_ORIGINS=*`): no private or presence channel. */
  publicOnly?: true;
  /** When it last sent a frame (epoch ms); the runtime's answers to its pings count too. */
  seen: number;
  /** When the server pinged it and is waiting for its answer (epoch ms), or 0. */
  pinged: number;
}

/** A new socket id: two random 32-bit numbers, `<digits>.<digits>` as Pusher's clients expect. */
export function newSocketId(): string {
  const [a, b] = crypto.getRandomValues(new Uint32Array(2));
  return `${a}.${b}`;
}

export class Connections {
  private readonly byId = new Map<string, WebSocket>();
  private readonly attachments = new WeakMap<WebSocket, ConnectionAttachment>();

  constructor(private readonly ctx: DurableObjectState) {
    for (const ws of ctx.getWebSockets()) {
      const a = this.attachment(ws);
      if (a) this.byId.set(a.id, ws);
    }
  }

  /** A new connection, held by the host (hibernatable). */
  accept(
    client: string,
    continent: string | null,
    publicOnly: boolean,
    now: number,
  ): { ws: WebSocket; response: Response } {
    const pair = new WebSocketPair();
    const [peer, server] = [pair[0], pair[1]];
    this.ctx.acceptWebSocket(server);
    const a: ConnectionAttachment = {
      id: newSocketId(),
      client,
      continent,
      ...(publicOnly ? { publicOnly: true as const } : {}),
      seen: now,
      pinged: 0,
    };
    server.serializeAttachment(a);
    this.attachments.set(server, a);
    this.byId.set(a.id, server);
    return { ws: server, response: new Response(null, { status: 101, webSocket: peer }) };
  }

  attachment(ws: WebSocket): ConnectionAttachment | null {
    let a = this.attachments.get(ws);
    if (!a) {
      a = (ws.deserializeAttachment() as ConnectionAttachment | null) ?? undefined;
      if (a) this.attachments.set(ws, a);
    }
    return a ?? null;
  }

  /** Changes what its attachment keeps. */
  update(ws: WebSocket, patch: Partial<ConnectionAttachment>): void {
    const a = this.attachment(ws);
    if (!a) return;
    Object.assign(a, patch);
    try {
      ws.serializeAttachment(a);
    } catch {
      // closed meanwhile
    }
  }

  idOf(ws: WebSocket): string {
    return this.attachment(ws)?.id ?? "";
  }

  byIdOf(id: string): WebSocket | undefined {
    return this.byId.get(id);
  }

  /** Sockets still open (one closed by the host stays listed until its peer answers the close). */
  open(): WebSocket[] {
    return this.ctx.getWebSockets().filter((ws) => ws.readyState === OPEN);
  }

  isOpen(ws: WebSocket): boolean {
    return ws.readyState === OPEN;
  }

  /** It closed: forgotten. */
  forget(ws: WebSocket): void {
    const id = this.attachment(ws)?.id;
    if (id !== undefined && this.byId.get(id) === ws) this.byId.delete(id);
  }

  get count(): number {
    return this.open().length;
  }

  /** Open connections per client, told to each client's ledger (src/relay/connection-holds.ts). */
  clientCounts(): [string, number][] {
    const counts = new Map<string, number>();
    for (const ws of this.open()) {
      const client = this.attachment(ws)?.client ?? "";
      counts.set(client, (counts.get(client) ?? 0) + 1);
    }
    return [...counts];
  }
}
