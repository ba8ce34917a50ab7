/**
 * Relay — one Durable Object per `relay:{channel}:{group}:{k}` (src/relay/placement.ts): it holds up to
 * `RELAY_CAPACITY` subscribers of one channel (WebSockets, hibernatable unless opened with a token,
 * and SSE streams) and sends them what the channel sends it, once per batch for all of them
 * (docs/api.md, "Relays").
 *
 * The class routes calls; each job is its own module:
 * - src/relay/subscribers.ts: its WebSockets (and what their attachments keep through
 *   hibernation) and SSE streams, and how each is closed.
 * - src/relay/stream.ts: order and repair (a hole is fetched from the channel's history
 *   before anything newer), a joining subscriber's replay, live sends — in one lane of work.
 * - src/relay/reporter.ts: count reports to the channel (coalesced, retried by the alarm).
 *   A relay left empty is told to leave: it deletes its storage and is gone from the registry.
 * - src/relay/lifetime.ts: token expiry and the SSE heartbeat, on the relay's one alarm;
 *   src/relay/revocations.ts: subscriptions of revoked sessions, on the same alarm.
 *   WebSockets that go away are told by the runtime (webSocketClose / webSocketError).
 * - src/relay/connection-holds.ts: what it holds of each client, told to the client's ledger
 *   (`MAX_CONNECTIONS_PER_CLIENT`, counted over all channels) when it changes; asked again by a ledger.
 * - src/relay/memory.ts: what waits for all subscribers together is bounded by
 *   {@link RELAY_MAX_BUFFERED_BYTES}; past it the subscribers most behind are closed first.
 */
import { DurableObject } from "cloudflare:workers";
import { bindObjectMetrics } from "../metrics/object-metrics";
import { AlarmScheduler } from "../platform/alarm-scheduler";
import { channelStub, metricsStub, revokedSessionsStub } from "../platform/stubs";
import { settingsOf } from "../settings/settings";
import { INTERNAL_CLOSE, NORMAL_CLOSE, SUBSCRIBER_SPOKE_CLOSE, SUBSCRIBER_SPOKE_REASON } from "../wire/close-codes";
import type { LiveFrame, SideFrame } from "../wire/frame-text";
import { FRAME_MAX_BYTES, RELAY_MAX_BUFFERED_BYTES } from "./bounds";
import {
  type ChannelForRelay,
  RELAY_REFUSED_STATUS,
  type RelayCounts,
  type RelayReportAnswer,
  readSubscribe,
} from "./calls";
import { type ConnectionHolds, connectionHolds } from "./connection-holds";
import { RelayLifetime } from "./lifetime";
import { readRateText } from "./reader-rate";
import { type RelayIdentity, RelayReporter } from "./reporter";
import { RelayRevocations } from "./revocations";
import { createRelayTable, readRelayRow } from "./schema";
import { SeqKeeper } from "./seq-keeper";
import { RelayStream } from "./stream";
import { PING, PONG, RelaySubscribers, type Subscriber } from "./subscribers";
import { ThinnedStream } from "./thinned-stream";

export class Relay extends DurableObject<Env> {
  private readonly sql: SqlStorage;
  private identity: RelayIdentity | null = null;
  /** The `relay` table exists (it goes with deleteAll). */
  private tableReady = false;
  /**
   * What the stored row holds but its seq (identity and reported counts): the row is written when
   * that changes. A batch that moved only the seq writes nothing to storage; the seq is kept on a
   * socket (src/relay/seq-keeper.ts), and the row's copy of it is where a relay with none starts.
   */
  private storedRest: string | null = null;
  /**
   * The row's copy of the seq. It may lag the stream (the sockets hold the latest) but never lead it:
   * a relay back with no socket then fetches again what it had sent, and never skips what it had not
   * (the stream's seq moves back when its channel started its numbering again).
   */
  private storedSeq = 0;
  /** The last seq sent, kept through hibernation on one of its sockets. */
  private readonly seqs: SeqKeeper;
  /**
   * It left its channel since this instance started and no subscriber came since: a delivery the
   * channel sent before it heard the leave finds nobody, and must not bring back a position.
   */
  private left = false;
  /** The one alarm: token expiries, the SSE heartbeat, a failed report's retry. */
  private readonly alarms: AlarmScheduler;
  private readonly subs: RelaySubscribers;
  private readonly reporter: RelayReporter;
  private readonly stream: RelayStream;
  private readonly lifetime: RelayLifetime;
  private readonly holds: ConnectionHolds;
  private readonly revocations: RelayRevocations;
  /** Bytes waiting for all subscribers together before the most behind are closed (a test lowers it). */
  maxBufferedBytes = RELAY_MAX_BUFFERED_BYTES;
  /** `FRAME_DELAY` in ms (docs/api.md, "Packed frames"); a test sets its own. */
  frameDelayMs: number;
  /** Most bytes of one packed frame (a test lowers it). */
  maxFrameBytes = FRAME_MAX_BYTES;
  /** The relay's clock for thinned subscribers (docs/api.md, "Each reader's rate"); a test gives its own. */
  clock: () => number = () => Date.now();

  constructor(ctx: DurableObjectState, env: Env) {
    super(ctx, env);
    this.sql = ctx.storage.sql;
    this.alarms = new AlarmScheduler(ctx.storage, "the relay's alarm");
    bindObjectMetrics(env);
    this.frameDelayMs = settingsOf(env).frameDelayMs;
    this.seqs = new SeqKeeper(ctx);
    this.subs = new RelaySubscribers(
      ctx,
      () => {
        this.reporter.changed();
        this.holds.changed();
        // A socket went (or came): if it held the seq, another takes it now, inside this event.
        if (this.identity && this.stream.lastSeq !== null) this.seqs.keep(this.stream.lastSeq);
      },
      {
        spoke: (ws) => this.webSocketMessage(ws, ""),
        closed: (ws, code) => this.webSocketClose(ws, code, "", false),
        failed: (ws) => this.webSocketError(ws, null),
      },
    );
    this.holds = connectionHolds(env, this.alarms, () => this.identity?.relay ?? null, this.subs);
    this.reporter = new RelayReporter(
      {
        identity: () => this.identity,
        counts: () => this.counts(),
        clientCounts: () => this.subs.clientCounts(),
        presenceCount: () => this.subs.presenceCount(),
        subscriberCount: () => this.subs.count,
        readers: () => ({ thinned: this.stream.thinned.thinned(), skipped: this.stream.thinned.readers.takeSkipped() }),
        unreported: (skipped) => this.stream.thinned.readers.giveBackSkipped(skipped),
        channel: () => this.channel(),
        store: () => this.store(),
        leave: () => this.leaveChannel(),
      },
      this.alarms,
    );
    const thinned = new ThinnedStream(
      {
        now: () => this.clock(),
        settings: () => settingsOf(env),
        channelKey: () => this.identity?.channel ?? null,
        channel: () => this.channel(),
        maxFrameBytes: () => this.maxFrameBytes,
        report: () => this.reporter.changed(),
        metrics: (deltas) => {
          metricsStub(env)
            .add(deltas)
            .catch((e: unknown) => {
              console.error("floodgate relay: could not count in /metrics", e instanceof Error ? e.message : e);
            });
        },
        keepSlowness: (ws, slow) => this.subs.keepSlowness(ws, slow),
        slowClosed: (n) => {
          this.reporter.slow(n);
          this.reporter.changed();
        },
      },
      this.subs,
    );
    this.stream = new RelayStream(
      {
        channel: () => this.channel(),
        store: () => this.store(),
        maxBufferedBytes: () => this.maxBufferedBytes,
        frameDelayMs: () => this.frameDelayMs,
        maxFrameBytes: () => this.maxFrameBytes,
        now: () => this.clock(),
      },
      this.subs,
      this.reporter,
      thinned,
    );
    this.lifetime = new RelayLifetime(this.subs, this.alarms, this.stream);
    this.revocations = new RelayRevocations(
      this.subs,
      this.alarms,
      this.stream,
      () => this.lifetime,
      () => revokedSessionsStub(env),
    );
    // `ping` is answered by the runtime without waking the relay, so an idle relay stays asleep.
    ctx.setWebSocketAutoResponse(new WebSocketRequestResponsePair(PING, PONG));
    ctx.blockConcurrencyWhile(async () => {
      await this.alarms.load();
      // Back from hibernation: where its sockets say the stream stood (newer than the row's copy). Read
      // with no row too: a socket left closing from before a leave must not outrank the next write.
      const held = this.subs.held();
      const kept = this.seqs.recover(held);
      const row = readRelayRow(this.sql);
      if (!row) return;
      this.tableReady = true;
      this.identity = { channel: row.channel, relay: row.relay, group: row.grp, k: row.k };
      const lastSeq = kept ?? row.last_seq;
      this.stream.lastSeq = lastSeq;
      this.reporter.reported = { websockets: row.reported_ws, sse: row.reported_sse };
      this.storedRest = this.restOfRow();
      this.storedSeq = row.last_seq;
      this.subs.restore(lastSeq, held);
      this.holds.restored();
      // Back from hibernation: subscribers with a max_rate, or thinned for slowness, are thinned again
      // (their attachments as read above: a wake reads each once).
      for (const [ws, a] of held) {
        if (ws.readyState !== WebSocket.OPEN) continue;
        const own = readRateText(a?.maxRate ?? null);
        if (own || a?.slow) thinned.readers.join(ws, own, a?.slow ?? null, false);
      }
      // Restarted: its SSE streams did not survive (their readers reconnect with Last-Event-ID).
      const now = this.counts();
      const heard = this.reporter.reported;
      if (now.websockets !== heard.websockets || now.sse !== heard.sse) this.reporter.changed();
    });
  }

  // ---- RPC from the channel ----------------------------------------------------------------------

  /**
   * A batch from the channel (possibly none: a head-only call after a failure), with the channel's
   * head seq and side frames sent after it (summaries, presence). Answers once it is sent, so the
   * channel's line to this relay stays in order.
   */
  deliver(frames: LiveFrame[], head: number, side: SideFrame[] = []): Promise<void> {
    // A relay that left its channel (or never joined one) has no one to send to: a call sent before
    // it left must not bring back a position it deleted with its storage.
    // (Frames sent to a relay that never joined are kept as its position: a reserved slot's
    // subscriber may be on its way, and its replay starts from there.)
    if (!this.identity && (frames.length === 0 || this.left)) return Promise.resolve();
    return this.stream.inLane(() => this.stream.apply(frames, head, side));
  }

  counts(): RelayCounts {
    return { websockets: this.subs.sockets().length, sse: this.subs.hub.size, last_seq: this.stream.lastSeq };
  }

  // ---- subscribe (fetch from the Worker) -------------------------------------------------------------

  /**
   * One subscriber, already authorised by the Worker, which took the slot from the channel: the
   * request is src/relay/calls.ts's `subscribeRequest` (the subscriber's own request, for its
   * upgrade), read back here with `readSubscribe`.
   */
  override async fetch(request: Request): Promise<Response> {
    const s = readSubscribe(request);
    if (!this.identity) {
      this.left = false;
      this.identity = { channel: s.channel, relay: s.relay, group: s.group, k: s.k };
    }
    // A relay that knows nothing yet starts where the channel was when the slot was taken.
    if (this.stream.lastSeq === null) this.stream.lastSeq = s.head;
    if (s.epoch) this.stream.epoch = s.epoch;
    this.reporter.joined.push(s.reservation);
    this.holds.joined(s.client, s.lease);
    let sub: Subscriber;
    let response: Response;
    if (s.mode === "ws") {
      const maxRate = s.maxRate ?? null;
      const sid = s.sid ?? null;
      ({ sub, response } = this.subs.acceptSocket(s.floor, s.expiresAt, s.client, s.batch, s.presence, maxRate, sid));
    } else {
      const opened = this.subs.hub.connect(s.floor, s.expiresAt, s.client, Date.now(), s.sid ?? undefined);
      opened.client.presence = s.presence;
      sub = { sse: opened.client };
      response = opened.response;
      this.lifetime.scheduleHeartbeat(Date.now());
    }
    // Its own rate (docs/api.md, "Each reader's rate"): held to it from its replay on.
    if (s.maxRate) this.stream.thinned.readers.join("ws" in sub ? sub.ws : sub.sse, s.maxRate);
    // A token verified a moment before its expiry asks for a time already past: the alarm runs at once.
    if (s.expiresAt !== null) this.alarms.request(s.expiresAt);
    // A session that may be revoked: the alarm asks the list of revoked sessions while it is here.
    if (s.sid) this.revocations.scheduleCheck(Date.now());
    // Counted by the channel before the subscriber is answered: stats and MAX_SUBSCRIBERS see it,
    // and a new relay is on the channel's delivery list before its first subscriber hears anything.
    let answer: RelayReportAnswer;
    try {
      answer = await this.reporter.report();
    } catch (e) {
      console.error("floodgate relay: could not report a join", e instanceof Error ? e.message : e);
      this.subs.leave(sub, INTERNAL_CLOSE, "relay unavailable");
      return new Response(null, { status: RELAY_REFUSED_STATUS });
    }
    // The channel's seq went back: it deleted itself while idle (HISTORY_TTL) and this relay, left
    // behind, still held the old stream's position. Start from the new stream's head instead. Only
    // for a relay whose one subscriber is this joiner (an idle channel has none left): with others on
    // it, a head below lastSeq is just an answer overtaken by a delivery, and moving back would send
    // them frames again.
    const lastSeq = this.stream.lastSeq;
    if (lastSeq !== null && answer.head < lastSeq && this.subs.count === 1) this.stream.lastSeq = answer.head;
    this.store();
    // Its first presence frame: the channel's state as of its own join, counting itself.
    const state: SideFrame | null =
      s.presence && answer.presence
        ? { event: "presence", text: answer.presence, version: answer.presenceVersion ?? 0 }
        : null;
    this.stream.inLane(() => this.stream.replay(sub, s.floor, state)).catch(() => {});
    this.stream.inLane(() => this.stream.apply([], answer.head)).catch(() => {});
    return response;
  }

  /**
   * Subscribers do not talk (docs/api.md, "Subscribing"): `ping` never gets here (the runtime answers
   * it), so any frame that does — text or binary, of any size — closes that socket with 1008. It is
   * never published.
   */
  override webSocketMessage(ws: WebSocket, _message: string | ArrayBuffer): void {
    this.subs.closeSocket(ws, SUBSCRIBER_SPOKE_CLOSE, SUBSCRIBER_SPOKE_REASON);
  }

  override webSocketClose(ws: WebSocket, code: number, _reason: string, _wasClean: boolean): void {
    this.subs.closeSocket(ws, code === 1005 || code === 1006 ? NORMAL_CLOSE : code, "closing");
  }

  override webSocketError(ws: WebSocket, _error: unknown): void {
    this.subs.closeSocket(ws, INTERNAL_CLOSE, "error");
  }

  override async alarm(): Promise<void> {
    this.alarms.fired();
    await this.tick(Date.now());
  }

  /** How many open subscriptions of `client` it holds now: its ledger asks again before refusing. */
  heldOf(client: string): number {
    return this.holds.of(client);
  }

  /**
   * The relay's alarm (its time is `now`; tests pass their own): closes the subscriptions whose token
   * expired (or anonymous SSE streams at their longest lifetime), writes due SSE heartbeats, repeats a
   * count report the channel did not get, ends the subscriptions of revoked sessions when the list is
   * due to be read, then asks for the next time any of these is due.
   */
  async tick(now: number): Promise<void> {
    if (!this.identity) return;
    const earliest = this.lifetime.expire(now);
    if (this.reporter.due()) this.reporter.changed();
    this.stream.thinned.tick(now);
    this.holds.tick();
    this.lifetime.schedule(now, earliest);
    await this.revocations.check(now);
  }

  // ---- internals ---------------------------------------------------------------------------------

  private channel(): ChannelForRelay {
    const channel = this.identity?.channel ?? "";
    return channelStub(this.env, channel);
  }

  /** Empty, and out of the channel's registry: nothing about this relay stays in storage. */
  private leaveChannel(): void {
    if (this.subs.count > 0 || this.reporter.joined.length > 0) return; // someone joined meanwhile
    this.identity = null;
    this.left = true;
    this.stream.lastSeq = null;
    this.subs.floors.clear();
    this.reporter.reset();
    this.holds.reset();
    this.tableReady = false;
    this.storedRest = null;
    this.storedSeq = 0;
    this.seqs.reset();
    this.lifetime.reset();
    this.revocations.reset();
    this.stream.thinned.readers.reset();
    this.alarms.cleared(); // deleteAll deletes the alarm too
    this.ctx.storage.deleteAll().catch((e: unknown) => {
      console.error("floodgate relay: could not delete its storage", e instanceof Error ? e.message : e);
    });
  }

  private store(): void {
    const id = this.identity;
    if (!id) return;
    const seq = this.stream.lastSeq ?? 0;
    this.seqs.keep(seq);
    const rest = this.restOfRow();
    if (rest === this.storedRest && seq >= this.storedSeq) return;
    if (!this.tableReady) {
      this.tableReady = true;
      createRelayTable(this.sql);
    }
    this.sql.exec(
      "INSERT OR REPLACE INTO relay (id, channel, relay, grp, k, last_seq, reported_ws, reported_sse) VALUES (1, ?, ?, ?, ?, ?, ?, ?)",
      id.channel,
      id.relay,
      id.group,
      id.k,
      seq,
      this.reporter.reported.websockets,
      this.reporter.reported.sse,
    );
    this.storedRest = rest;
    this.storedSeq = seq;
  }

  /** The stored row's columns other than its seq, as one comparable string. */
  private restOfRow(): string | null {
    const id = this.identity;
    if (!id) return null;
    const { websockets, sse } = this.reporter.reported;
    return `${id.channel}\u0000${id.relay}\u0000${id.group}\u0000${id.k}\u0000${websockets}\u0000${sse}`;
  }
}
