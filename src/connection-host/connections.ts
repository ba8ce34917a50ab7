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
  /** The lanes whose last seq it holds (./lane-seq.ts): channel key → [seq, generation]. */
  seqs?: Record<string, [number, number]>;
}

/**
 * How much of an attachment (at most 2 KiB in all) the lanes' seqs may take: the keys' characters
 * plus {@link SEQ_ENTRY_BYTES} each. The rest is its id, client (an `ip:` key) and continent, and an
 * attachment whose client is longer gets less (see {@link seqRoom}). A Pusher channel's key is at most
 * 204 characters (`pusher:`, 164, and a shard's `#` and name of up to 32), so at least four lanes fit.
 */
export const SEQ_ROOM_BYTES = 1024;
/** What one seq entry weighs beside its key: two numbers and the structure around them (about 25). */
const SEQ_ENTRY_BYTES = 32;
/** The most an attachment may hold (the runtime's limit). */
const ATTACHMENT_BYTES = 2048;
/** What the attachment's fields take beside their texts (names, numbers, structure), with room to spare. */
const FIELDS_BYTES = 160;

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

  /**
   * Writes lane `key`'s seq into the attachment of `ws`: false when it has no room for another lane
   * (it still holds the lanes it had) or is closed.
   */
  keepSeq(ws: WebSocket, key: string, seq: number, generation: number): boolean {
    const a = this.attachment(ws);
    if (!a) return false;
    const seqs = a.seqs ?? {};
    const had = seqs[key];
    if (!had && seqBytes(seqs) + key.length + SEQ_ENTRY_BYTES > seqRoom(a)) return false;
    seqs[key] = [seq, generation];
    a.seqs = seqs;
    try {
      ws.serializeAttachment(a);
      return true;
    } catch {
      // Closed meanwhile: what it keeps in memory stays what it stored.
      if (had) seqs[key] = had;
      else delete seqs[key];
      return false;
    }
  }

  /**
   * Lane `key`'s seq leaves the attachment of `ws` (it is no longer the lane's anchor). Not from one
   * closing or closed (its close event sees it CLOSING, and CLOSED once the host has closed it back):
   * a write there is one per lane it anchored, for a socket about to go, and the later generation
   * written elsewhere outranks the entry should it linger after a wake (./lane-seq.ts).
   */
  dropSeq(ws: WebSocket, key: string): void {
    if (!this.isOpen(ws)) return;
    const a = this.attachment(ws);
    if (!a?.seqs || !(key in a.seqs)) return;
    delete a.seqs[key];
    try {
      ws.serializeAttachment(a);
    } catch {
      // closed meanwhile: it goes with its socket
    }
  }

  /** Every lane seq the listed sockets hold, with the socket holding it (after a wake). */
  heldSeqs(): { ws: WebSocket; key: string; seq: number; generation: number }[] {
    const out: { ws: WebSocket; key: string; seq: number; generation: number }[] = [];
    for (const ws of this.ctx.getWebSockets()) {
      for (const [key, [seq, generation]] of Object.entries(this.attachment(ws)?.seqs ?? {}))
        out.push({ ws, key, seq, generation });
    }
    return out;
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

/** The room an attachment has for seqs: {@link SEQ_ROOM_BYTES}, or less beside a long client. */
function seqRoom(a: ConnectionAttachment): number {
  const fields = a.id.length + a.client.length + (a.continent?.length ?? 0) + FIELDS_BYTES;
  return Math.min(SEQ_ROOM_BYTES, ATTACHMENT_BYTES - fields);
}

/** The room the seqs of one attachment take (see {@link SEQ_ROOM_BYTES}). */
function seqBytes(seqs: Record<string, [number, number]>): number {
  let n = 0;
  for (const key in seqs) n += key.length + SEQ_ENTRY_BYTES;
  return n;
}
