/**
 * One channel on a connection host (docs/operations.md, "The Pusher door: how it scales"): to that
 * channel the host is a relay (src/channel/relay-registry.ts), and the lane is what a relay is for one
 * channel — its last seq, its repair, its count reports — for the host's sockets subscribed to it.
 *
 * **Order and repair** as a relay's stream (src/relay/gap-repair.ts): every call from the channel
 * carries its head; a batch that does not follow the lane's last seq makes the lane fetch the hole from
 * the channel's history first, so no subscription sees a message skipped, repeated or out of order. A
 * hole history no longer holds closes the connections on the lane (4200: Pusher clients reconnect and
 * subscribe again); one too big to send closes them as over capacity (4100).
 *
 * **Sends**: each batch is turned into socket texts once (./pusher-adapter.ts) and every socket of
 * the lane is sent the same texts, skipping what is below its floor (messages from before it
 * subscribed) and the one socket a message excludes (a client event's sender, the HTTP API's
 * `socket_id`).
 *
 * **Joining**: a subscription is reported to the channel before it is answered (the report's answer
 * carries the presence set), then, in the lane's order, sent `subscription_succeeded`, the messages
 * after its floor the lane already passed, and whatever side frames came meanwhile; then live.
 *
 * **Reports**: the relay's own reporter (src/relay/reporter.ts), one per lane: the lane's
 * subscriptions and their clients (`user:<id>` on a presence channel, so the channel's per-client
 * counts are its members), members' `user_info` once each.
 */

import type { CloseReason } from "../metrics/series";
import type { AlarmScheduler } from "../platform/alarm-scheduler";
import { SerialLane } from "../platform/serial-lane";
import { SUBSCRIBER_MAX_BEHIND_BYTES } from "../relay/bounds";
import type { ChannelForRelay, RelayReportAnswer } from "../relay/calls";
import { fillHole, pastLastSent } from "../relay/gap-repair";
import { RelayReporter } from "../relay/reporter";
import type { LiveFrame, SideFrame } from "../wire/frame-text";
import { PUSHER_OVER_CAPACITY, PUSHER_RECONNECT } from "../wire/pusher/codes";
import { subscriptionSucceeded } from "../wire/pusher/frames";
import { isPresence } from "../wire/pusher/names";
import { LaneSeq, type LaneSeqHolders } from "./lane-seq";
import { type LaneProtocol, type LaneSideText, PusherLane } from "./pusher-adapter";

/** One socket's subscription on a lane. */
export interface LaneSub {
  socketId: string;
  /** The key the channel counts it under: `user:<user_id>` on a presence channel, else its connection's. */
  client: string;
  /** Messages up to this seq are not its (published before it subscribed). */
  floor: number;
  userId: string | null;
  userInfo: string | null;
  /** Reported, not yet answered `subscription_succeeded`: not sent anything live. */
  joining: boolean;
  /** Presence member frames up to this version are in the set it was sent. */
  skipUpTo: number;
  /** Side frames that came while it was joining, sent after its `subscription_succeeded`. */
  pendingSide?: LaneSideText[];
}

/**
 * Most side frames kept for one joining subscription: a join waits on one report to its channel, so
 * more means a flood of member events or summaries; the oldest go, counted
 * (`floodgate_pusher_side_frames_dropped_total`).
 */
const PENDING_SIDE_MAX = 64;

/** What a lane needs of its host. */
export interface LaneOwner extends Pick<LaneSeqHolders, "keepSeq" | "dropSeq" | "nextGeneration"> {
  identity(): { name: string; group: string; k: number } | null;
  channel(key: string): ChannelForRelay;
  readonly alarms: AlarmScheduler;
  /**
   * Stores the lane's row: the count its channel last heard, and its last seq with a new generation, or
   * the seq and generation its keeper gives (./lane-seq.ts: no connection took it).
   */
  storeLane(lane: HostLane, kept?: { seq: number; generation: number }): void;
  /** The channel said leave (the lane has no subscription): the host forgets it. */
  leaveLane(lane: HostLane): void;
  /** A socket was sent to: the host bounds what waits on it and on all its sockets together. */
  sent(ws: WebSocket): void;
  /** `n` side frames let go for a joining subscription past the most it keeps (counted in `/metrics`). */
  droppedSide(n: number): void;
  /**
   * Ends a whole connection (a hole the lane cannot send across, a catch-up too large or failed),
   * its subscriptions counted as ended for `ended`.
   */
  closeConnection(ws: WebSocket, code: number, reason: string, ended: CloseReason): void;
}

export class HostLane {
  readonly subs = new Map<WebSocket, LaneSub>();
  /** The last seq sent on this lane, or null when it knows none. */
  lastSeq: number | null = null;
  /** Where `lastSeq` outlives the host's memory: a connection's attachment, or the lane's row. */
  readonly seq: LaneSeq;
  readonly reporter: RelayReporter;
  readonly presence: boolean;
  private readonly protocol: LaneProtocol;
  private readonly queue = new SerialLane();
  /** Members whose `user_info` this lane has told its channel. */
  private readonly infoSent = new Set<string>();

  constructor(
    /** The channel object's key (a shard's key on a channel sharded by continent). */
    readonly key: string,
    /** The channel's Pusher name. */
    readonly name: string,
    private readonly owner: LaneOwner,
  ) {
    this.presence = isPresence(name);
    this.protocol = new PusherLane(name);
    this.seq = new LaneSeq(key, {
      keepSeq: (ws, k, seq, generation) => owner.keepSeq(ws, k, seq, generation),
      dropSeq: (ws, k) => owner.dropSeq(ws, k),
      storeRow: (seq, generation) => owner.storeLane(this, { seq, generation }),
      nextGeneration: () => owner.nextGeneration(),
    });
    this.reporter = new RelayReporter(
      {
        identity: () => {
          const id = owner.identity();
          return id ? { channel: key, relay: id.name, group: id.group, k: id.k } : null;
        },
        counts: () => ({ websockets: this.subs.size, sse: 0 }),
        clientCounts: () => {
          const counts = new Map<string, number>();
          for (const s of this.subs.values()) counts.set(s.client, (counts.get(s.client) ?? 0) + 1);
          return [...counts];
        },
        presenceCount: () => 0,
        infos: () => (this.presence ? this.unsentInfos() : undefined),
        subscriberCount: () => this.subs.size,
        channel: () => owner.channel(key),
        store: () => owner.storeLane(this),
        leave: () => {
          if (this.subs.size === 0 && this.reporter.joined.length === 0) owner.leaveLane(this);
        },
      },
      owner.alarms,
    );
  }

  /** Runs `task` after every earlier delivery and join of this lane. */
  inLane<T>(task: () => Promise<T> | T): Promise<T> {
    return this.queue.run(task);
  }

  /** A call from the channel: `frames` after the hole before them is repaired, then `side`. */
  async apply(frames: LiveFrame[], head: number, side: readonly SideFrame[] = []): Promise<void> {
    const end = Math.max(head, frames.at(-1)?.seq ?? 0);
    if (this.subs.size === 0) {
      this.lastSeq = Math.max(this.lastSeq ?? 0, end);
      this.reporter.changed();
      return;
    }
    let { fresh, hole } = pastLastSent(frames, this.lastSeq ?? 0, end);
    if (hole) {
      const filled = await fillHole(this.owner.channel(this.key), hole);
      if ("lost" in filled) {
        for (const ws of [...this.subs.keys()]) {
          // Too big to fetch in one go is slowness, as a relay counts it: each connection would be
          // more than 1 MiB behind.
          if (filled.lost === "too-big")
            this.owner.closeConnection(ws, PUSHER_OVER_CAPACITY, "too far behind on a channel; reconnect", "slow");
          else
            this.owner.closeConnection(
              ws,
              PUSHER_RECONNECT,
              "missed messages are no longer in history; reconnect",
              "history_gap",
            );
        }
        this.advance(end);
        return;
      }
      fresh = [...filled.frames, ...fresh];
    }
    this.send(fresh, side);
    this.advance(end);
  }

  private advance(seq: number): void {
    this.lastSeq = Math.max(this.lastSeq ?? 0, seq);
    if (this.subs.size > 0) this.seq.keep(this.lastSeq, this.subs);
  }

  /** Every live subscription of the lane is sent the batch's texts and the side frames it takes. */
  private send(frames: readonly LiveFrame[], side: readonly SideFrame[]): void {
    if (frames.length === 0 && side.length === 0) return;
    const texts = this.protocol.messages(frames);
    const sides = side.length > 0 ? this.protocol.side(side) : [];
    if (texts.length === 0 && sides.length === 0) return;
    for (const [ws, sub] of this.subs) {
      if (sub.joining) {
        if (sides.length > 0) {
          const pending = [...(sub.pendingSide ?? []), ...sides];
          if (pending.length > PENDING_SIDE_MAX) this.owner.droppedSide(pending.length - PENDING_SIDE_MAX);
          sub.pendingSide = pending.slice(-PENDING_SIDE_MAX);
        }
        continue;
      }
      try {
        for (const t of texts) if (t.text !== null && t.seq > sub.floor && t.exclude !== sub.socketId) ws.send(t.text);
        for (const s of sides) if (s.version === undefined || s.version > sub.skipUpTo) ws.send(s.text);
      } catch {
        continue; // closed meanwhile: its close takes it off the lane
      }
      this.owner.sent(ws);
    }
  }

  /**
   * A subscription joins, holding the channel's reservation: reported (the channel counts it and
   * answers the presence set), then, in the lane's order, answered and sent what it is owed. Answers
   * false when the channel could not be told (nothing changed: the subscription is gone again).
   */
  async join(ws: WebSocket, sub: LaneSub, reservation: string, head: number): Promise<boolean> {
    if (this.lastSeq === null) this.lastSeq = head;
    sub.joining = true;
    this.subs.set(ws, sub);
    this.reporter.joined.push(reservation);
    let answer: RelayReportAnswer;
    try {
      answer = await this.reporter.report();
    } catch (e) {
      console.error("floodgate host: could not report a subscription", e instanceof Error ? e.message : e);
      // Gone again as any subscription goes: a seq it took meanwhile moves to another connection.
      if (this.subs.get(ws) === sub) this.leave(ws);
      else this.reporter.changed();
      return false;
    }
    if (answer.pusher?.needInfo) {
      this.infoSent.clear();
      this.reporter.changed();
    }
    // The channel's seq went back (it deleted itself while idle): start from its new head.
    if (this.lastSeq !== null && answer.head < this.lastSeq && this.subs.size === 1) this.lastSeq = answer.head;
    this.inLane(() => this.goLive(ws, sub, answer)).catch(() => {});
    this.inLane(() => this.apply([], answer.head)).catch(() => {});
    return true;
  }

  /** In the lane's order: `subscription_succeeded`, the messages it is owed, what came while it joined. */
  private async goLive(ws: WebSocket, sub: LaneSub, answer: RelayReportAnswer): Promise<void> {
    if (this.subs.get(ws) !== sub) return;
    const upTo = this.lastSeq ?? 0;
    let owed: ReturnType<LaneProtocol["messages"]> = [];
    if (sub.floor < upTo) {
      let page: Awaited<ReturnType<ChannelForRelay["framesAfter"]>>;
      try {
        page = await this.owner.channel(this.key).framesAfter(sub.floor, upTo, SUBSCRIBER_MAX_BEHIND_BYTES);
      } catch (e) {
        console.error("floodgate host: could not catch a subscription up", e instanceof Error ? e.message : e);
        this.owner.closeConnection(ws, PUSHER_RECONNECT, "could not catch up on a channel; reconnect", "internal");
        return;
      }
      // Owed more than 1 MiB: slow, as a relay counts a replay past the same bound, and closed as the
      // host's other slow connections are (4100: the client backs off before it reconnects).
      if (page.more) {
        this.owner.closeConnection(ws, PUSHER_OVER_CAPACITY, "too far behind on a channel; reconnect", "slow");
        return;
      }
      owed = this.protocol.messages(page.frames);
      if (this.subs.get(ws) !== sub) return;
    }
    const version = answer.pusher?.version ?? 0;
    try {
      ws.send(subscriptionSucceeded(this.name, answer.pusher?.set ?? "{}"));
      for (const t of owed) if (t.text !== null && t.exclude !== sub.socketId) ws.send(t.text);
      for (const s of sub.pendingSide ?? []) if (s.version === undefined || s.version > version) ws.send(s.text);
    } catch {
      // closed meanwhile
    }
    sub.joining = false;
    sub.skipUpTo = version;
    sub.floor = Math.max(sub.floor, upTo);
    delete sub.pendingSide;
    this.owner.sent(ws);
  }

  /** A subscription ends (unsubscribe, or its connection closed): the channel hears it. */
  leave(ws: WebSocket): boolean {
    const sub = this.subs.get(ws);
    if (!sub) return false;
    this.subs.delete(ws);
    this.seq.left(ws, this.lastSeq, this.subs);
    if (sub.userId !== null && ![...this.subs.values()].some((s) => s.userId === sub.userId)) {
      this.infoSent.delete(sub.userId);
    }
    this.reporter.changed();
    return true;
  }

  /** Members' `user_info` not yet told to the channel (each once per lane). */
  private unsentInfos(): [string, string | null][] {
    const out: [string, string | null][] = [];
    for (const s of this.subs.values()) {
      if (s.userId === null || this.infoSent.has(s.userId)) continue;
      this.infoSent.add(s.userId);
      out.push([s.userId, s.userInfo]);
    }
    return out;
  }
}
