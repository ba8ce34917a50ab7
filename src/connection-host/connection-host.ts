/**
 * ConnectionHost — one Durable Object per `host:{group}:{k}` (src/host-directory/naming.ts): up to
 * `RELAY_CAPACITY` Pusher connections of one placement group, each subscribed to up to 100 channels
 * (docs/api.md, "The Pusher door"; docs/operations.md, "The Pusher door: how it scales").
 *
 * A connection belongs to many channels, and a channel's audience still spreads over objects as in
 * docs/api.md "Relays": to each channel it serves the host is a relay — it holds a slot in the
 * channel's relay registry, reports its subscriptions there, and receives each batch once for all its
 * connections on that channel, whatever their number. Per channel the host keeps a lane (./lane.ts):
 * its last seq, its repair, its reports; a protocol adapter (./pusher-adapter.ts) turns each batch
 * into the texts its sockets are sent, once per batch.
 *
 * The class routes; each job is its own module:
 * - ./connections.ts: the hibernatable sockets and their attachments;
 * - ./subscriptions.ts: `pusher:subscribe` / `pusher:unsubscribe`, checked in order;
 * - ./lane.ts: one channel's delivery, repair, joins and reports; ./lane-seq.ts: where its last seq
 *   outlives the host's memory (a connection's attachment, or the lane's row);
 * - ./client-events.ts: `client-*` events, published through the Worker's pipeline;
 * - ./liveness.ts: the activity timeout (server pings, 4201);
 * - ./backlog.ts: its memory bound (a connection 1 MiB behind, 32 MiB for all of them);
 * - ./host-lanes.ts: its lanes, one per channel, and ./lane-room.ts: how many it keeps (10,000),
 *   counted in its directory's placement;
 * - ./host-metrics.ts: errors, connections and subscriptions for `/metrics`;
 * - ./host-store.ts: its tables (./schema.ts).
 * Its place in its group's directory (src/host-directory/) is reported like a relay's count.
 */
import { DurableObject } from "cloudflare:workers";
import { admissionOf } from "../channel/client-cap";
import { directoryName } from "../host-directory/naming";
import type { CloseReason } from "../metrics/series";
import { AlarmScheduler } from "../platform/alarm-scheduler";
import { channelStub, hostDirectoryStub } from "../platform/stubs";
import { type ConnectionHolds, connectionHolds } from "../relay/connection-holds";
import { RelayReporter } from "../relay/reporter";
import { settingsOf } from "../settings/settings";
import type { LiveFrame, SideFrame } from "../wire/frame-text";
import { readClientFrame } from "../wire/pusher/client-frames";
import { PUSHER_BAD_FRAME, PUSHER_OVER_CAPACITY } from "../wire/pusher/codes";
import { pusherBodyMax } from "../wire/pusher/event-meta";
import { connectionEstablished, PING, PONG, pusherError, subscriptionError } from "../wire/pusher/frames";
import { memberKey, pusherName } from "../wire/pusher/names";
import { HostBacklog } from "./backlog";
import { HOST_FULL_STATUS, readHostConnect } from "./calls";
import { ClientEvents } from "./client-events";
import { Connections } from "./connections";
import { HostLanes } from "./host-lanes";
import { HostMetrics } from "./host-metrics";
import { HostReads } from "./host-reads";
import { HostStore } from "./host-store";
import type { HostLane, LaneOwner } from "./lane";
import { Liveness } from "./liveness";
import { HostSubscriptions } from "./subscriptions";

/** What a frame from a connection may weigh beyond its event (its data JSON-escaped): names, auth, JSON. */
const FRAME_OVERHEAD_BYTES = 4096;

export class ConnectionHost extends DurableObject<Env> implements LaneOwner {
  private readonly store: HostStore;
  private id: { name: string; group: string; k: number } | null = null;
  readonly alarms: AlarmScheduler;
  private readonly connections: Connections;
  /** One lane per channel its connections hold, bounded; its directory hears them as load. */
  private readonly lanes: HostLanes;
  private readonly subscriptions: HostSubscriptions;
  private readonly clientEvents: ClientEvents;
  private readonly liveness: Liveness;
  private readonly metrics: HostMetrics;
  /** Its count in its group's directory (src/host-directory/). */
  private readonly directory: RelayReporter;
  private readonly holds: ConnectionHolds;
  /** The host's memory bound: bytes waiting on each socket and on all of them. */
  private readonly backlog: HostBacklog;
  /** Connections already closed and cleaned up (a close may be seen twice). */
  private readonly closed = new WeakSet<WebSocket>();
  /** The last generation a lane's seq was written with, or found with after a wake (./lane-seq.ts). */
  private generation = 0;

  constructor(ctx: DurableObjectState, env: Env) {
    super(ctx, env);
    this.store = new HostStore(ctx.storage.sql);
    this.lanes = new HostLanes({
      owner: this,
      capacity: () => settingsOf(this.env).relayCapacity,
      loadChanged: () => this.directory.changed(),
      deleteRow: (key) => this.store.deleteLane(key),
    });
    this.alarms = new AlarmScheduler(ctx.storage, "the connection host's alarm");
    this.connections = new Connections(ctx);
    this.metrics = new HostMetrics(env);
    this.backlog = new HostBacklog({
      closeSlow: (ws, reason) => this.closeConnection(ws, PUSHER_OVER_CAPACITY, reason, "slow"),
    });
    this.subscriptions = new HostSubscriptions(new HostReads(env, this.metrics), {
      settings: () => settingsOf(this.env),
      identity: () => this.id,
      attachment: (ws) => this.connections.attachment(ws),
      lane: (key, name) => this.lanes.forSubscribe(key, name),
      existingLane: (key) => this.lanes.get(key),
      laneRoom: this.lanes.room,
      reserve: async (key, client, visibility) => {
        const s = settingsOf(this.env);
        const id = this.id as { name: string; group: string; k: number };
        return await channelStub(this.env, key).assignHost(
          key,
          id.name,
          id.group,
          id.k,
          client,
          admissionOf(s, visibility),
          { announceMax: s.presenceAnnounceMax, intervalMs: s.presenceIntervalMs },
        );
      },
      send: (ws, text) => this.send(ws, text),
      subscriptionError: (ws, channel, status, type, error, named) => {
        this.metrics.error("subscription", status);
        this.metrics.refusal(status, named);
        this.send(ws, subscriptionError(channel, status, type, error));
      },
      storeSubscription: (socketId, key, sub) => this.store.storeSubscription(socketId, key, sub),
      deleteSubscription: (socketId, key) => this.store.deleteSubscription(socketId, key),
      subscribed: (n) =>
        this.metrics.inc("floodgate_pusher_subscriptions_total", { event: n > 0 ? "opened" : "closed" }),
    });
    this.clientEvents = new ClientEvents(ctx, env, {
      channelsOf: (ws) => this.subscriptions.channelsOf(ws),
      lane: (key) => this.lanes.get(key),
      attachment: (ws) => this.connections.attachment(ws),
      error: (ws, code, message) => this.error(ws, code, message),
    });
    this.liveness = new Liveness(
      ctx,
      this.connections,
      this.alarms,
      () => settingsOf(this.env).pusher.activityTimeoutS * 1000,
      (ws, code, reason) => this.closeConnection(ws, code, reason),
    );
    this.directory = new RelayReporter(
      {
        identity: () => (this.id ? { channel: directoryName(this.id.group), relay: this.id.name, ...this.id } : null),
        // A host has no SSE: the directory adds `sse` to `websockets` when it places, so a host
        // whose lanes count for more than its connections reports the rest there.
        counts: () => ({
          websockets: this.connections.count,
          sse: Math.max(0, this.lanes.load - this.connections.count),
        }),
        clientCounts: () => [],
        presenceCount: () => 0,
        subscriberCount: () => this.connections.count,
        channel: () => hostDirectoryStub(this.env, directoryName(this.id?.group ?? "")),
        store: () => {},
        leave: () => this.leaveDirectory(),
      },
      this.alarms,
    );
    // Each connection counts toward its client's MAX_CONNECTIONS_PER_CLIENT over all channels.
    this.holds = connectionHolds(env, this.alarms, () => this.id?.name ?? null, this.connections);
    // pusher-js's own ping is answered without waking the host (./liveness.ts counts it as activity).
    ctx.setWebSocketAutoResponse(new WebSocketRequestResponsePair(PING, PONG));
    ctx.blockConcurrencyWhile(async () => {
      await this.alarms.load();
      this.restore();
      this.holds.restored();
    });
  }

  // ---- from the Worker: one connection ------------------------------------------------------------

  override async fetch(request: Request): Promise<Response> {
    const c = readHostConnect(request);
    if (!this.id) {
      this.id = { name: c.host, group: c.group, k: c.k };
      this.store.storeHost(this.id);
    }
    // Full in connections, or in lanes: its directory's count was behind (it counts both).
    if (this.connections.count >= c.capacity || this.lanes.room.full) {
      return new Response(null, { status: HOST_FULL_STATUS });
    }
    const now = Date.now();
    const { ws, response } = this.connections.accept(c.client, c.continent, c.publicOnly, now);
    const a = this.connections.attachment(ws);
    ws.send(connectionEstablished(a?.id ?? "", settingsOf(this.env).pusher.activityTimeoutS));
    this.directory.joined.push(c.reservation);
    this.directory.changed();
    this.holds.joined(c.client, c.lease);
    this.liveness.watch(now);
    this.metrics.inc("floodgate_pusher_connections_total", { event: "opened" });
    return response;
  }

  // ---- from the channels: deliveries ----------------------------------------------------------------

  /**
   * A batch from channel `key` (possibly none: a head-only call), with its head and the side frames
   * after it. Answers once it is sent, so the channel's line to this host stays in order.
   */
  deliver(key: string, frames: LiveFrame[], head: number, side: SideFrame[] = []): Promise<void> {
    if (!this.id) return Promise.resolve();
    // A channel this host left (or never kept): an empty lane reports so, and the channel drops it.
    const lane = this.lanes.of(key, pusherName(key) ?? key);
    return lane.inLane(() => lane.apply(frames, head, side));
  }

  // ---- from the connections -----------------------------------------------------------------------

  override async webSocketMessage(ws: WebSocket, message: string | ArrayBuffer): Promise<void> {
    if (typeof message !== "string") return this.error(ws, PUSHER_BAD_FRAME, "binary frames are not supported");
    // A client event's data of MAX_MESSAGE_BYTES arrives JSON-escaped in its frame, as it is stored.
    const max = pusherBodyMax(settingsOf(this.env).maxMessageBytes) + FRAME_OVERHEAD_BYTES;
    if (message.length > max) return this.error(ws, PUSHER_BAD_FRAME, `frame larger than ${max} bytes`);
    this.connections.update(ws, { seen: Date.now(), pinged: 0 });
    const f = readClientFrame(message);
    switch (f.kind) {
      case "ping":
        return this.send(ws, PONG);
      case "pong":
        return;
      case "subscribe":
        return this.subscriptions.subscribe(ws, f.channel, f.auth, f.channelData);
      case "unsubscribe":
        return this.subscriptions.unsubscribe(ws, f.channel);
      case "client-event":
        return this.clientEvents.publish(ws, f.event, f.channel, f.data);
      case "bad":
        return this.error(ws, PUSHER_BAD_FRAME, f.message);
    }
  }

  override webSocketClose(ws: WebSocket, code: number, _reason: string, _wasClean: boolean): void {
    this.closeConnection(ws, code === 1005 || code === 1006 ? 1000 : code, "closing");
  }

  override webSocketError(ws: WebSocket, _error: unknown): void {
    this.closeConnection(ws, 1011, "error");
  }

  override async alarm(): Promise<void> {
    this.alarms.fired();
    const now = Date.now();
    this.liveness.tick(now);
    for (const lane of this.lanes.values()) if (lane.reporter.due()) lane.reporter.changed();
    if (this.directory.due()) this.directory.changed();
    this.holds.tick();
  }

  /** How many connections of `client` it holds now: its ledger asks again before refusing. */
  heldOf(client: string): number {
    return this.holds.of(client);
  }

  // ---- LaneOwner ----------------------------------------------------------------------------------

  identity(): { name: string; group: string; k: number } | null {
    return this.id;
  }

  channel(key: string) {
    return channelStub(this.env, key);
  }

  storeLane(lane: HostLane, kept?: { seq: number; generation: number }): void {
    const seq = kept?.seq ?? lane.lastSeq ?? 0;
    this.store.storeLane(lane.key, seq, lane.reporter.reported.websockets, kept?.generation ?? lane.seq.stamp(seq));
  }

  keepSeq(ws: WebSocket, key: string, seq: number, generation: number): boolean {
    return this.connections.keepSeq(ws, key, seq, generation);
  }

  dropSeq(ws: WebSocket, key: string): void {
    this.connections.dropSeq(ws, key);
  }

  nextGeneration(): number {
    this.generation = Math.max(Date.now(), this.generation + 1);
    return this.generation;
  }

  leaveLane(lane: HostLane): void {
    if (!this.lanes.leave(lane)) return;
    // The last lane of a host with no connection: its directory hears it is empty, and it leaves.
    if (this.lanes.size === 0 && this.connections.count === 0) this.directory.changed();
  }

  sent(ws: WebSocket): void {
    this.backlog.sent(ws);
  }

  droppedSide(n: number): void {
    this.metrics.inc("floodgate_pusher_side_frames_dropped_total", {}, n);
  }

  /**
   * Ends a connection: closed with `code`, its subscriptions ended, its directory told. `ended`: why
   * Floodgate ended it, counted once per subscription it held; none when the client went (its own
   * close, a socket error, no pong: 4201), as a native subscriber's own close is not counted.
   */
  closeConnection(ws: WebSocket, code: number, reason: string, ended?: CloseReason): void {
    if (this.closed.has(ws)) return;
    this.closed.add(ws);
    try {
      ws.close(code, reason);
    } catch {
      // already closed
    }
    this.backlog.forget(ws);
    if (ended === "slow") this.lanes.closedSlow(ws, this.subscriptions.channelsOf(ws).values());
    const subscriptions = this.subscriptions.dropConnection(ws);
    if (ended) this.metrics.closed(ended, subscriptions);
    this.connections.forget(ws);
    this.directory.changed();
    this.holds.changed();
    this.metrics.inc("floodgate_pusher_connections_total", { event: "closed" });
  }

  // ---- internals ----------------------------------------------------------------------------------

  private send(ws: WebSocket, text: string): void {
    try {
      ws.send(text);
    } catch {
      // closed meanwhile
    }
  }

  /** A `pusher:error`, counted; the connection stays. */
  private error(ws: WebSocket, code: number, message: string): void {
    this.metrics.error("error", code);
    this.send(ws, pusherError(code, message));
  }

  /**
   * After a restart or a wake from hibernation: who it is, its lanes and each socket's subscriptions.
   * Subscriptions of sockets that are gone (the host was evicted, not hibernated) end, and every lane
   * whose count differs from what its channel last heard reports.
   */
  private restore(): void {
    const stored = this.store.restored();
    if (!stored) return;
    const row = stored.host;
    this.id = { name: row.name, group: row.grp, k: row.k };
    this.generation = Math.max(this.generation, this.lanes.restoreRows(stored.lanes));
    for (const s of stored.subscriptions) {
      const ws = this.connections.byIdOf(s.socket);
      const a = ws ? this.connections.attachment(ws) : null;
      const name = pusherName(s.channel);
      if (!ws || !a || name === null) {
        this.store.deleteSubscription(s.socket, s.channel);
        continue;
      }
      const lane = this.lanes.of(s.channel, name);
      const client = s.user_id === null ? a.client : memberKey(s.user_id);
      lane.subs.set(ws, {
        socketId: s.socket,
        client,
        floor: s.floor,
        userId: s.user_id,
        userInfo: s.user_info,
        joining: false,
        skipUpTo: 0,
      });
      this.subscriptions.restore(ws, name, s.channel);
    }
    // A seq a connection holds is its lane's when it is the latest write (./lane-seq.ts).
    for (const h of this.connections.heldSeqs()) {
      this.generation = Math.max(this.generation, h.generation);
      const lane = this.lanes.get(h.key);
      if (!lane || h.generation <= lane.seq.generation) continue;
      lane.lastSeq = h.seq;
      lane.seq.recovered(h.seq, h.generation, h.ws);
    }
    this.lanes.restored();
    if (this.connections.count === 0) this.directory.changed();
  }

  /** Its directory said leave (no connection): nothing about this host stays in storage. */
  private leaveDirectory(): void {
    if (this.connections.count > 0 || this.directory.joined.length > 0 || this.lanes.size > 0) return;
    this.id = null;
    this.store.forget();
    this.directory.reset();
    this.holds.reset();
    this.alarms.cleared();
    this.ctx.storage.deleteAll().catch((e: unknown) => {
      console.error("floodgate host: could not delete its storage", e instanceof Error ? e.message : e);
    });
  }

  /** Stats for the dashboard: connections, and channels with their subscriptions. */
  hostStats(): { connections: number; channels: { channel: string; subscriptions: number }[] } {
    return {
      connections: this.connections.count,
      channels: [...this.lanes.values()].map((l) => ({ channel: l.key, subscriptions: l.subs.size })),
    };
  }
}
