/**
 * Relay — one Durable Object per `relay:{channel}:{group}:{k}` (src/delivery/placement.ts): it holds up to
 * `RELAY_CAPACITY` subscribers of one channel (hibernatable WebSockets and SSE streams) and sends them
 * what the channel sends it, once per batch for all of them (docs/api.md, "Relays").
 *
 * **Order and repair.** The relay knows the last seq it sent (`last_seq`, stored with every batch,
 * so it survives eviction; its WebSockets survive too, hibernated). Every call from the channel
 * carries the channel's head seq; a batch that does not follow `last_seq` (a call that failed, frames
 * the channel let go, a restart) makes the relay fetch the hole from the channel's history first, so
 * a subscriber never sees seq jump. A hole that history no longer holds (trimmed past
 * `HISTORY_LIMIT`) closes every subscriber with {@link HISTORY_GAP_CLOSE}; a hole too big to send
 * ({@link PAGE_MAX_BYTES}) closes them as slow consumers. Either way they resume with `?after=`.
 *
 * **Joining.** A subscriber comes with the slot the channel reserved and the channel's head at that
 * moment: it gets every message after `after` (or after that head when it did not resume), replayed
 * from the channel's history up to the relay's `last_seq`, then live — in the relay's one lane of
 * work, so nothing between replay and live is skipped or repeated, whichever relay it lands on.
 *
 * **Counts.** After every change the relay reports its WebSockets and SSE streams to the channel
 * (one report in flight; changes meanwhile go in the next; a report that failed is tried again by
 * the alarm). A relay left empty is told to leave: it deletes its storage and is gone from the
 * channel's registry.
 *
 * **Lifetime.** A subscription opened with a token ends when the token expires: the expiry is kept in
 * the WebSocket's attachment (it survives hibernation) or on the SSE stream, and the relay's one
 * alarm, set for the earliest expiry, closes it (WebSocket {@link TOKEN_EXPIRED_CLOSE}; SSE
 * `event: expired`, then the end). The same alarm writes every SSE stream a comment line each
 * {@link SSE_HEARTBEAT_MS}: the write is what finds a reader that went away, which then stops
 * counting. WebSockets that go away are told by the runtime (webSocketClose / webSocketError).
 *
 * **Memory.** What waits in the relay for all its subscribers together is bounded by
 * {@link RELAY_MAX_BUFFERED_BYTES}; past it the subscribers most behind are closed first.
 */
import { DurableObject } from "cloudflare:workers";
import type { ChannelObject } from "../channel/channel-object";
import { type LiveFrame, sseChunk, sseEvent } from "../channel/frames";
import type { RelayReportAnswer } from "../channel/types";
import { ApiError } from "../http/errors";
import { AlarmScheduler } from "../platform/alarm-scheduler";
import { channelStub } from "../platform/stubs";
import { type SseClient, SseHub } from "./sse-hub";
import {
  HISTORY_GAP_CLOSE,
  HISTORY_GAP_REASON,
  PAGE_MAX_BYTES,
  RELAY_MAX_BUFFERED_BYTES,
  RELAY_MEMORY_REASON,
  REPORT_RETRY_MS,
  SLOW_CONSUMER_CLOSE,
  SLOW_CONSUMER_REASON,
  SSE_HEARTBEAT_MS,
  SUBSCRIBER_MAX_BEHIND_BYTES,
  SUBSCRIBER_SPOKE_CLOSE,
  SUBSCRIBER_SPOKE_REASON,
  TOKEN_EXPIRED_CLOSE,
  TOKEN_EXPIRED_REASON,
} from "./subscriber-bounds";

/** `WebSocket.OPEN`. */
const OPEN = 1;

/** Who this relay is; stored once it has a subscriber. */
interface RelayIdentity {
  channel: string;
  relay: string;
  group: string;
  k: number;
}

/**
 * Kept on each WebSocket (survives hibernation): messages up to `floor` are never sent to it live;
 * it is closed at `expiresAt` (epoch ms, its token's `exp`), or never when null (anonymous); it is
 * counted for `client` (src/delivery/client-cap.ts).
 */
interface SocketAttachment {
  floor: number;
  expiresAt?: number | null;
  client?: string;
}

export interface RelayCounts {
  websockets: number;
  sse: number;
  /** The last seq this relay sent its subscribers, or null when it holds none and knows none. */
  last_seq: number | null;
}

/** A subscriber being replayed to or live. */
type Subscriber = { ws: WebSocket } | { sse: SseClient };

export class Relay extends DurableObject<Env> {
  private readonly sql: SqlStorage;
  private identity: RelayIdentity | null = null;
  private lastSeq: number | null = null;
  private readonly hub = new SseHub(() => this.countsChanged());
  /** WebSockets still being replayed to: not sent live messages until that is done. */
  private readonly joining = new Set<WebSocket>();
  /** WebSockets that joined ahead of `lastSeq` (a resume past a batch still on its way). */
  private readonly floors = new Map<WebSocket, number>();
  /** Reservations of subscribers that joined since the last report. */
  private joined: string[] = [];
  private slowClosed = 0;
  /** Deliveries and replays, one at a time in arrival order. */
  private lane: Promise<unknown> = Promise.resolve();
  private reporting: Promise<RelayReportAnswer> | null = null;
  private nextReport: Promise<RelayReportAnswer> | null = null;
  /** The counts the channel last heard (stored): after a restart a difference is reported. */
  private reported = { websockets: 0, sse: 0 };
  /**
   * A report failed and none has got through since: the alarm repeats it even when the totals match
   * what the channel heard (one client's socket closed, another's opened: per-client counts differ).
   */
  private reportOwed = false;
  /** The `relay` table exists (it goes with deleteAll). */
  private tableReady = false;
  /** The one alarm: token expiries, the SSE heartbeat, a failed report's retry. */
  private readonly alarms: AlarmScheduler;
  /** When SSE streams are next written a comment line (epoch ms; 0: not scheduled). */
  private nextHeartbeat = 0;
  /** Bytes waiting for all subscribers together before the most behind are closed (a test lowers it). */
  maxBufferedBytes = RELAY_MAX_BUFFERED_BYTES;

  constructor(ctx: DurableObjectState, env: Env) {
    super(ctx, env);
    this.sql = ctx.storage.sql;
    this.alarms = new AlarmScheduler(ctx.storage, "the relay's alarm");
    // `ping` is answered by the runtime without waking the relay, so an idle relay stays asleep.
    ctx.setWebSocketAutoResponse(new WebSocketRequestResponsePair("ping", "pong"));
    ctx.blockConcurrencyWhile(async () => {
      await this.alarms.load();
      const stored = this.sql
        .exec<{ n: number }>("SELECT COUNT(*) AS n FROM sqlite_master WHERE type = 'table' AND name = 'relay'")
        .one().n;
      if (stored === 0) return;
      this.tableReady = true;
      const row = this.sql.exec<RelayRow>("SELECT * FROM relay").toArray()[0];
      if (!row) return;
      this.identity = { channel: row.channel, relay: row.relay, group: row.grp, k: row.k };
      this.lastSeq = row.last_seq;
      this.reported = { websockets: row.reported_ws, sse: row.reported_sse };
      for (const ws of this.ctx.getWebSockets()) {
        const a = ws.deserializeAttachment() as SocketAttachment | null;
        if (a && a.floor > row.last_seq) this.floors.set(ws, a.floor);
      }
      // Restarted: its SSE streams did not survive (their readers reconnect with Last-Event-ID).
      const now = this.counts();
      if (now.websockets !== this.reported.websockets || now.sse !== this.reported.sse) this.countsChanged();
    });
  }

  // ---- RPC from the channel ----------------------------------------------------------------------

  /**
   * A batch from the channel (possibly none: a head-only call after a failure), with the channel's
   * head seq. Answers once it is sent, so the channel's line to this relay stays in order.
   */
  deliver(frames: LiveFrame[], head: number): Promise<void> {
    return this.inLane(() => this.apply(frames, head));
  }

  counts(): RelayCounts {
    return { websockets: this.openSockets().length, sse: this.hub.size, last_seq: this.lastSeq };
  }

  // ---- subscribe (fetch from the Worker) -------------------------------------------------------------

  /**
   * `GET /subscribe?channel&relay&group&k&mode=ws|sse&floor&head&reservation`, already authorised by
   * the Worker, which took the slot from the channel (`floor`: the resume point, at most `head`).
   */
  override async fetch(request: Request): Promise<Response> {
    const q = new URL(request.url).searchParams;
    const head = Number(q.get("head"));
    const floor = Math.min(Number(q.get("floor")), head);
    const expires = Number(q.get("expires") ?? Number.NaN);
    const expiresAt = Number.isFinite(expires) ? expires : null;
    const owner = q.get("client") ?? "";
    if (!this.identity) {
      this.identity = {
        channel: q.get("channel") ?? "",
        relay: q.get("relay") ?? "",
        group: q.get("group") ?? "",
        k: Number(q.get("k")),
      };
    }
    // A relay that knows nothing yet starts where the channel was when the slot was taken.
    if (this.lastSeq === null) this.lastSeq = head;
    this.joined.push(q.get("reservation") ?? "");
    let sub: Subscriber;
    let response: Response;
    if (q.get("mode") === "ws") {
      const pair = new WebSocketPair();
      const [client, server] = [pair[0], pair[1]];
      this.ctx.acceptWebSocket(server);
      server.serializeAttachment({ floor, expiresAt, client: owner } satisfies SocketAttachment);
      this.joining.add(server);
      sub = { ws: server };
      response = new Response(null, { status: 101, webSocket: client });
    } else {
      const opened = this.hub.connect(floor, expiresAt, owner);
      sub = { sse: opened.client };
      response = opened.response;
      this.scheduleHeartbeat(Date.now());
    }
    // A token verified a moment before its expiry asks for a time already past: the alarm runs at once.
    if (expiresAt !== null) this.alarms.request(expiresAt);
    // Counted by the channel before the subscriber is answered: stats and MAX_SUBSCRIBERS see it,
    // and a new relay is on the channel's delivery list before its first subscriber hears anything.
    let answer: RelayReportAnswer;
    try {
      answer = await this.report();
    } catch (e) {
      console.error("floodgate relay: could not report a join", e instanceof Error ? e.message : e);
      this.leave(sub, 1011, "relay unavailable");
      return new ApiError("unavailable", "channel is temporarily unavailable; retry").toResponse();
    }
    // The channel's seq went back: it deleted itself while idle (HISTORY_TTL) and this relay, left
    // behind, still held the old stream's position. Start from the new stream's head instead. Only
    // for a relay whose one subscriber is this joiner (an idle channel has none left): with others on
    // it, a head below lastSeq is just an answer overtaken by a delivery, and moving back would send
    // them frames again.
    if (this.lastSeq !== null && answer.head < this.lastSeq && this.subscriberCount() === 1) {
      this.lastSeq = answer.head;
    }
    this.store();
    this.inLane(() => this.replay(sub, floor)).catch(() => {});
    this.inLane(() => this.apply([], answer.head)).catch(() => {});
    return response;
  }

  /**
   * Subscribers do not talk (docs/api.md, "Subscribing"): `ping` never gets here (the runtime answers
   * it), so any frame that does — text or binary, of any size — closes that socket with 1008. It is
   * never published.
   */
  override webSocketMessage(ws: WebSocket, _message: string | ArrayBuffer): void {
    this.closeSocket(ws, SUBSCRIBER_SPOKE_CLOSE, SUBSCRIBER_SPOKE_REASON);
  }

  override webSocketClose(ws: WebSocket, code: number, _reason: string, _wasClean: boolean): void {
    this.closeSocket(ws, code === 1005 || code === 1006 ? 1000 : code, "closing");
  }

  override webSocketError(ws: WebSocket, _error: unknown): void {
    this.closeSocket(ws, 1011, "error");
  }

  override async alarm(): Promise<void> {
    this.alarms.fired();
    this.tick(Date.now());
  }

  /**
   * The relay's alarm (its time is `now`; tests pass their own): closes the subscriptions whose token
   * expired, writes due SSE heartbeats, repeats a count report the channel did not get, then asks for
   * the next time any of these is due.
   */
  tick(now: number): void {
    if (!this.identity) return;
    let earliest = Number.POSITIVE_INFINITY;
    for (const ws of this.openSockets()) {
      const expiresAt = (ws.deserializeAttachment() as SocketAttachment | null)?.expiresAt ?? null;
      if (expiresAt === null) continue;
      if (expiresAt <= now) this.closeSocket(ws, TOKEN_EXPIRED_CLOSE, TOKEN_EXPIRED_REASON);
      else earliest = Math.min(earliest, expiresAt);
    }
    this.hub.expire(now);
    if (this.hub.size > 0 && now >= this.nextHeartbeat) {
      this.hub.heartbeat();
      this.nextHeartbeat = 0;
    }
    const counts = this.counts();
    const differs = counts.websockets !== this.reported.websockets || counts.sse !== this.reported.sse;
    if (!this.reporting && (this.reportOwed || differs)) {
      this.countsChanged();
    }
    this.alarms.request(Math.min(earliest, this.hub.earliestExpiry() ?? Number.POSITIVE_INFINITY));
    this.scheduleHeartbeat(now);
  }

  // ---- internals ---------------------------------------------------------------------------------

  /** While SSE streams are open, the alarm is due for their next comment line. */
  private scheduleHeartbeat(now: number): void {
    if (this.hub.size === 0) return;
    if (this.nextHeartbeat <= now) this.nextHeartbeat = now + SSE_HEARTBEAT_MS;
    this.alarms.request(this.nextHeartbeat);
  }

  /**
   * The relay's memory bound: while the bytes waiting for all subscribers together exceed
   * {@link maxBufferedBytes}, the subscriber most behind is closed (4008; an SSE stream is cut off and
   * its backlog discarded). A relay under the bound costs one pass over its subscribers.
   */
  private boundMemory(): void {
    const behind: { bytes: number; sub: Subscriber }[] = [];
    let total = 0;
    for (const ws of this.openSockets()) {
      const bytes = ws.bufferedAmount;
      total += bytes;
      if (bytes > 0) behind.push({ bytes, sub: { ws } });
    }
    for (const client of this.hub.all) {
      const bytes = this.hub.backlog(client);
      total += bytes;
      if (bytes > 0) behind.push({ bytes, sub: { sse: client } });
    }
    if (total <= this.maxBufferedBytes) return;
    behind.sort((a, b) => b.bytes - a.bytes);
    for (const { bytes, sub } of behind) {
      if (total <= this.maxBufferedBytes) break;
      total -= bytes;
      this.slowClosed++;
      if ("ws" in sub) this.closeSocket(sub.ws, SLOW_CONSUMER_CLOSE, RELAY_MEMORY_REASON);
      else this.hub.cut(sub.sse);
    }
  }

  /** Runs `task` after every earlier delivery and replay; a failure fails only its own caller. */
  private inLane<T>(task: () => Promise<T> | T): Promise<T> {
    const run = this.lane.then(task);
    this.lane = run.catch(() => {});
    return run;
  }

  /**
   * Sends what follows `lastSeq`: `frames`, after the hole before them (or up to `head`) is fetched
   * from the channel's history.
   */
  private async apply(frames: LiveFrame[], head: number): Promise<void> {
    const end = Math.max(head, frames.at(-1)?.seq ?? 0);
    let sockets = this.openSockets();
    if (sockets.length + this.hub.size === 0) {
      // Nobody to send to: remember where the stream is, and make sure the channel knows we are empty.
      this.lastSeq = Math.max(this.lastSeq ?? 0, end);
      // Always, not only when it last reported subscribers: a relay kept for a slot that then lapsed
      // is told to leave by this report, instead of lingering on the channel's delivery list.
      if (this.identity) this.countsChanged();
      return;
    }
    const last = this.lastSeq ?? 0;
    let fresh = frames.filter((f) => f.seq > last);
    const firstNew = fresh[0]?.seq ?? end + 1;
    if (firstNew > last + 1 && end > last) {
      const gapEnd = firstNew - 1;
      const page = await this.channel().framesAfter(last, gapEnd, PAGE_MAX_BYTES);
      if (page.more) {
        // Too far behind to send in one go: each subscriber would be more than 1 MiB behind.
        this.closeAll(SLOW_CONSUMER_CLOSE, SLOW_CONSUMER_REASON, true);
        this.advance(end, false);
        return;
      }
      if (page.frames.length !== gapEnd - last || page.frames[0]?.seq !== last + 1) {
        // History no longer holds the hole: nothing newer is sent across it.
        this.closeAll(HISTORY_GAP_CLOSE, HISTORY_GAP_REASON, false);
        this.advance(end, false);
        return;
      }
      fresh = [...page.frames, ...fresh];
      sockets = this.openSockets(); // subscribers may have come or gone while it waited
    }
    this.sendLive(fresh, sockets);
    this.advance(end, true);
  }

  /**
   * `lastSeq` moves to `seq`; stored (so it survives eviction) when the relay has subscribers — not
   * after it closed them all, since it is about to leave and delete its storage.
   */
  private advance(seq: number, store: boolean): void {
    this.lastSeq = Math.max(this.lastSeq ?? 0, seq);
    if (this.floors.size > 0) for (const [ws, floor] of this.floors) if (floor <= this.lastSeq) this.floors.delete(ws);
    if (store) this.store();
  }

  /** A joining subscriber's replay: messages after `floor` up to `lastSeq`, then live. */
  private async replay(sub: Subscriber, floor: number): Promise<void> {
    if (("ws" in sub && sub.ws.readyState !== OPEN) || ("sse" in sub && sub.sse.closed)) return;
    const upTo = this.lastSeq ?? 0;
    if (floor < upTo) {
      let page: { frames: LiveFrame[]; more: boolean };
      try {
        page = await this.channel().framesAfter(floor, upTo, SUBSCRIBER_MAX_BEHIND_BYTES);
      } catch (e) {
        console.error("floodgate relay: replay failed", e instanceof Error ? e.message : e);
        this.leave(sub, 1011, "replay failed; reconnect with ?after=<last seq received>");
        return;
      }
      if ("ws" in sub) for (const f of page.frames) sub.ws.send(f.text);
      else if (page.frames.length > 0) this.hub.write(sub.sse, sseChunk(page.frames.map(sseEvent)));
      this.boundMemory();
      if (page.more) {
        // A replay past the byte bound sends what fits, then closes like a slow subscriber.
        this.slowClosed++;
        this.leave(sub, SLOW_CONSUMER_CLOSE, SLOW_CONSUMER_REASON);
        return;
      }
    }
    if ("ws" in sub) {
      this.joining.delete(sub.ws);
      if (floor > upTo) this.floors.set(sub.ws, floor);
    } else {
      this.hub.goLive(sub.sse);
    }
  }

  /** Sends frames to every live subscriber; one that falls 1 MiB behind is closed, never waited for. */
  private sendLive(frames: LiveFrame[], sockets: WebSocket[]): void {
    if (frames.length === 0) return;
    let closed = 0;
    let slow = 0;
    for (const ws of sockets) {
      if (this.joining.has(ws)) continue;
      const floor = this.floors.get(ws);
      try {
        for (const f of frames) if (floor === undefined || f.seq > floor) ws.send(f.text);
        // Unread bytes past the bound: stop sending and close, so one stalled reader can hold at
        // most the bound plus one batch, and never slows the others (sends do not block).
        if (ws.bufferedAmount > SUBSCRIBER_MAX_BEHIND_BYTES) {
          slow++;
          ws.close(SLOW_CONSUMER_CLOSE, SLOW_CONSUMER_REASON);
        }
      } catch {
        // A socket whose send fails is dropped without disturbing the others.
        closed++;
        try {
          ws.close(1011, "send failed");
        } catch {
          // already gone
        }
      }
    }
    if (this.hub.live.size > 0) {
      const chunk = sseChunk(frames.map(sseEvent)); // written to every reader; counted per reader
      const first = frames[0]?.seq ?? 0;
      for (const client of [...this.hub.live]) {
        const own = client.floor >= first ? sseChunk(frames.filter((f) => f.seq > client.floor).map(sseEvent)) : chunk;
        if (own.byteLength > 0 && !this.hub.write(client, own)) slow++;
      }
    }
    if (slow > 0) this.slowClosed += slow;
    if (slow > 0 || closed > 0) this.countsChanged();
    this.boundMemory();
  }

  /** Closes every subscriber (a hole it cannot send across); they resume with `?after=`. */
  private closeAll(code: number, reason: string, slow: boolean): void {
    let n = 0;
    for (const ws of this.openSockets()) {
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
    if (slow) this.slowClosed += n;
    this.countsChanged();
  }

  private leave(sub: Subscriber, code: number, reason: string): void {
    if ("ws" in sub) this.closeSocket(sub.ws, code, reason);
    else this.hub.end(sub.sse);
  }

  private closeSocket(ws: WebSocket, code: number, reason: string): void {
    this.joining.delete(ws);
    this.floors.delete(ws);
    try {
      ws.close(code, reason);
    } catch {
      // already closed
    }
    this.countsChanged();
  }

  /**
   * Sockets still open: one this relay closed stays listed until its peer answers the close, which a
   * stalled reader never does, so it must not count as a subscriber nor be sent to.
   */
  private openSockets(): WebSocket[] {
    return this.ctx.getWebSockets().filter((ws) => ws.readyState === OPEN);
  }

  /** Open subscriptions per client: the channel's per-client totals follow the relay's real sockets. */
  private clientCounts(): [string, number][] {
    const counts = new Map<string, number>();
    const add = (key: string) => counts.set(key, (counts.get(key) ?? 0) + 1);
    for (const ws of this.openSockets()) add((ws.deserializeAttachment() as SocketAttachment | null)?.client ?? "");
    for (const c of this.hub.all) add(c.client);
    return [...counts];
  }

  private subscriberCount(): number {
    return this.openSockets().length + this.hub.size;
  }

  private channel(): DurableObjectStub<ChannelObject> {
    const channel = this.identity?.channel ?? "";
    return channelStub(this.env, channel);
  }

  /** Counts changed: tell the channel (coalesced); a relay left empty then leaves. */
  private countsChanged(): void {
    if (!this.identity) return;
    this.report().then(
      (answer) => {
        if (answer.leave) this.leaveChannel();
      },
      (e) => {
        console.error("floodgate relay: could not report counts", e instanceof Error ? e.message : e);
        // Tried again even if nothing else changes: a subscriber gone must stop counting.
        this.reportOwed = true;
        this.alarms.request(Date.now() + REPORT_RETRY_MS);
      },
    );
  }

  /**
   * One report in flight at a time; a report asked for meanwhile is the next one, made when the
   * first returns and carrying everything that changed by then (a join storm costs a few calls).
   */
  private report(): Promise<RelayReportAnswer> {
    if (!this.reporting) {
      const sent = this.sendReport();
      this.reporting = sent;
      sent.then(
        () => {
          if (this.reporting === sent) this.reporting = null;
        },
        () => {
          if (this.reporting === sent) this.reporting = null;
        },
      );
      return sent;
    }
    if (!this.nextReport) {
      this.nextReport = this.reporting
        .catch(() => null)
        .then(() => {
          this.nextReport = null;
          return this.report();
        });
    }
    return this.nextReport;
  }

  private async sendReport(): Promise<RelayReportAnswer> {
    const id = this.identity;
    if (!id) return { leave: true, head: 0 };
    const joined = this.joined;
    const slowClosed = this.slowClosed;
    this.joined = [];
    this.slowClosed = 0;
    const counts = this.counts();
    try {
      const answer = await this.channel().relayReport(id.channel, {
        relay: id.relay,
        group: id.group,
        k: id.k,
        websockets: counts.websockets,
        sse: counts.sse,
        clients: this.clientCounts(),
        joined,
        slowClosed,
      });
      this.reported = { websockets: counts.websockets, sse: counts.sse };
      this.reportOwed = false;
      if (this.subscriberCount() > 0) this.store();
      return answer;
    } catch (e) {
      // Told again with the next report.
      this.joined.push(...joined);
      this.slowClosed += slowClosed;
      throw e;
    }
  }

  /** Empty, and out of the channel's registry: nothing about this relay stays in storage. */
  private leaveChannel(): void {
    if (this.subscriberCount() > 0 || this.joined.length > 0) return; // someone joined meanwhile
    this.identity = null;
    this.lastSeq = null;
    this.floors.clear();
    this.reported = { websockets: 0, sse: 0 };
    this.reportOwed = false;
    this.tableReady = false;
    this.nextHeartbeat = 0;
    this.alarms.cleared(); // deleteAll deletes the alarm too
    this.ctx.storage.deleteAll().catch((e: unknown) => {
      console.error("floodgate relay: could not delete its storage", e instanceof Error ? e.message : e);
    });
  }

  private store(): void {
    const id = this.identity;
    if (!id) return;
    if (!this.tableReady) {
      this.tableReady = true;
      this.sql.exec(`CREATE TABLE IF NOT EXISTS relay (
        id INTEGER PRIMARY KEY CHECK (id = 1), channel TEXT NOT NULL, relay TEXT NOT NULL, grp TEXT NOT NULL,
        k INTEGER NOT NULL, last_seq INTEGER NOT NULL, reported_ws INTEGER NOT NULL, reported_sse INTEGER NOT NULL)`);
    }
    this.sql.exec(
      "INSERT OR REPLACE INTO relay (id, channel, relay, grp, k, last_seq, reported_ws, reported_sse) VALUES (1, ?, ?, ?, ?, ?, ?, ?)",
      id.channel,
      id.relay,
      id.group,
      id.k,
      this.lastSeq ?? 0,
      this.reported.websockets,
      this.reported.sse,
    );
  }
}

interface RelayRow {
  [key: string]: SqlStorageValue;
  channel: string;
  relay: string;
  grp: string;
  k: number;
  last_seq: number;
  reported_ws: number;
  reported_sse: number;
}
