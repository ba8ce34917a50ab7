/**
 * A channel's side of its relays (docs/api.md "Relays"): the registry of its relays
 * (src/channel/relay-registry.ts: which relay a new subscriber goes to, how full each is), stored in
 * the `relays` table, and the fan-out that sends each batch once per relay, concurrently, each on its
 * own ordered line (src/channel/relay-pipe.ts) that the publish never waits for. Relays call back to
 * report their counts and to fetch what they missed.
 */

import { bindObjectMetrics } from "../metrics/object-metrics";
import type { AlarmScheduler } from "../platform/alarm-scheduler";
import { activeChannelsStub } from "../platform/stubs";
import { PAGE_MAX_BYTES } from "../relay/bounds";
import type { RelayReport, RelayReportAnswer } from "../relay/calls";
import { relayName } from "../relay/placement";
import { settingsOf } from "../settings/settings";
import { frame, type LiveFrame, type MessageFields, type SideFrame, takeFrameBytes } from "../wire/frame-text";
import type { RelaySlot } from "./calls";
import type { Admission } from "./client-cap";
import type { MessageRow } from "./messages";
import { ChannelPresence, type PresenceAnswer, type PresenceSettings } from "./presence";
import { PusherAudience } from "./pusher-audience";
import { ChannelReaders } from "./readers";
import { RelayLines } from "./relay-lines";
import type { RelayPipe } from "./relay-pipe";
import { clientCounts, isHostName, type RelayEntry, RelayRegistry } from "./relay-registry";
import type { ChannelStore } from "./store";

/** How soon after a fan-out the channel wakes to re-send the head, in case it was reset meanwhile. */
const RELAY_WAKE_MS = 10_000;
/** Least time between two wake-ups of every relay to refresh their counts (see probe). */
const RELAY_PROBE_MS = 5_000;

interface RelayRow {
  [key: string]: SqlStorageValue;
  name: string;
  grp: string;
  k: number;
  websockets: number;
  sse: number;
  clients: string;
}

export class ChannelRelays {
  /** The channel's relays; active ones are stored in the `relays` table. */
  private readonly relays: RelayRegistry;
  /** The delivery line to each active relay and host (src/channel/relay-lines.ts). */
  private readonly lines: RelayLines;
  /** When every relay was last woken to refresh its counts (see probe). */
  private lastProbe = 0;
  /** Occupancy and who is here, told to the subscribers that take presence (src/channel/presence.ts). */
  private readonly presence: ChannelPresence;
  /** Presence's settings: this object's configuration, or the Worker's as its last subscribe passed them. */
  private presenceSettings: PresenceSettings;
  /** Pusher members and size frames (src/channel/pusher-audience.ts). */
  readonly pusher: PusherAudience;
  /** The subscribers its relays thin, as they report them (src/channel/readers.ts). */
  readonly readers: ChannelReaders;

  /** @param subscriberLeft a relay left: idle expiry may count from the last publish (src/channel/idle-expiry.ts). */
  constructor(
    private readonly store: ChannelStore,
    private readonly scheduler: AlarmScheduler,
    private readonly env: Env,
    private readonly subscriberLeft: () => void,
  ) {
    this.lines = new RelayLines(store, env);
    bindObjectMetrics(env);
    this.relays = new RelayRegistry(
      {
        save: (e) => this.save(e),
        remove: (name) => {
          if (!this.store.wiped) this.store.sql.exec("DELETE FROM relays WHERE name = ?", name);
        },
      },
      (group, k) => relayName(this.store.channel ?? "", group, k),
    );
    this.presenceSettings = presenceSettings(env);
    this.readers = new ChannelReaders(store);
    this.presence = new ChannelPresence(
      {
        channel: () => this.store.channel ?? "",
        occupancy: () => {
          const t = this.relays.totals(Date.now());
          return t.websockets + t.sse;
        },
        clientMaps: () => this.relays.active().map((e) => e.clients),
        send: (frames, relays) => {
          for (const name of relays) if (this.relays.get(name)?.active) this.pipeTo(name).pushSide(frames);
        },
        probe: (now) => {
          this.probe(now, true);
          return this.relays.active().length;
        },
      },
      scheduler,
      () => this.presenceSettings,
    );
    this.pusher = new PusherAudience(
      {
        channel: () => this.store.channel ?? "",
        occupancy: () => {
          const t = this.relays.totals(Date.now());
          return t.websockets + t.sse;
        },
        hosts: () => this.hosts(),
        send: (frames, hosts) => {
          for (const name of hosts) this.pipeTo(name).pushSide(frames);
        },
        list: (channel, subscriptions, users) =>
          activeChannelsStub(this.env).notePusherChannel(channel, subscriptions, users),
      },
      scheduler,
      () => this.presenceSettings,
    );
  }

  /** The active connection hosts (src/connection-host/): Pusher frames go to these only. */
  private hosts(): string[] {
    return this.relays
      .active()
      .filter((e) => isHostName(e.name))
      .map((e) => e.name);
  }

  /** In the object's `blockConcurrencyWhile`, once the store has loaded. */
  load(): void {
    if (this.store.wiped) return;
    this.relays.load(
      this.store.sql
        .exec<RelayRow>("SELECT name, grp, k, websockets, sse, clients FROM relays")
        .toArray()
        .map((r) => ({ ...r, group: r.grp, clients: clientCounts(parseJson(r.clients), r.websockets + r.sse) })),
    );
    this.pusher.load(this.relays.active().map((e) => e.clients));
    // A new instance (restart, eviction) does not know what its relays got: a batch that was on its
    // way when the old one went is lost on the line, so each relay hears the head and repairs. A
    // publish arriving first does the same with its own call, and then no extra call is made.
    if (this.relays.size > 0) setTimeout(() => this.syncUnused(), 0);
  }

  /** Subscribers of every relay together, by kind. */
  totals(now: number): { websockets: number; sse: number } {
    const { websockets, sse } = this.relays.totals(now);
    return { websockets, sse };
  }

  /** Subscribers of every relay, and those on their way to one (slots reserved). */
  occupancy(): number {
    const t = this.relays.totals(Date.now());
    return t.websockets + t.sse + t.reserved;
  }

  /** Relays serving the channel. */
  get activeCount(): number {
    return this.relays.active().length;
  }

  /** Delivery calls made to relays, those not yet stored included. */
  get sendsTotal(): number {
    return this.lines.sendsTotal;
  }

  /**
   * A slot for one subscriber of `client` (src/channel/client-cap.ts) on a relay of its placement
   * group, or why not (src/channel/relay-registry.ts `Assignment`: the client's cap, its /48's,
   * `MAX_SUBSCRIBERS`, the anonymous share); with the head seq: the subscriber gets every message after it (or after its
   * `?after=`, if lower).
   */
  assign(group: string, capacity: number, client: string, limits: Admission, presence?: PresenceSettings): RelaySlot {
    if (presence) this.presenceSettings = presence;
    const now = Date.now();
    this.relays.sweep(now);
    const a = this.relays.assign(group, capacity, now, client, limits);
    // Refused, or a new relay opened: counts matter now, and a relay reset since its last report
    // (its WebSockets dropped) still counts them until something wakes it. Wake them all.
    if (!("relay" in a) || !this.relays.get(a.relay)?.active) this.probe(now);
    if (!("relay" in a)) return a;
    const entry = this.relays.get(a.relay) as RelayEntry;
    return { ...a, group, k: entry.k, head: this.store.counter("last_seq"), epoch: this.store.epoch };
  }

  /**
   * A slot for one Pusher subscription on the connection host `host` (src/connection-host/), with the
   * refusals of {@link assign}; the host's first report puts it on the delivery list.
   */
  assignHost(
    host: string,
    group: string,
    k: number,
    client: string,
    limits: Admission,
    presence?: PresenceSettings,
  ): RelaySlot {
    if (presence) this.presenceSettings = presence;
    const now = Date.now();
    this.relays.sweep(now);
    const a = this.relays.assignOn(host, group, k, now, client, limits);
    if (!("relay" in a)) {
      this.probe(now);
      return a;
    }
    return { ...a, group, k, head: this.store.counter("last_seq"), epoch: this.store.epoch };
  }

  /**
   * A relay's counts after a change (src/relay/reporter.ts): joins confirm their reserved slots, and a relay
   * reported empty with no slot reserved leaves. Its first report puts it on the delivery list.
   */
  report(report: RelayReport): RelayReportAnswer {
    const now = Date.now();
    const known = this.relays.get(report.relay);
    const before = known?.active
      ? { count: known.websockets + known.sse, clients: known.clients }
      : { count: 0, clients: new Map<string, number>() };
    const answer = this.relays.report(report, now);
    this.readers.reported(report, answer.leave);
    if (report.slowClosed > 0) this.store.bump({ slow_consumers_closed: report.slowClosed });
    if (answer.leave) {
      this.lines.stop(report.relay);
      this.subscriberLeft();
    }
    const entry = answer.leave ? undefined : this.relays.get(report.relay);
    const after = entry
      ? { count: entry.websockets + entry.sse, clients: entry.clients }
      : { count: 0, clients: new Map() };
    this.presence.reported(report.relay, before, after, report.joined.length, entry ? (report.presence ?? 0) : 0, now);
    const members = this.pusher.reported(before.clients, after.clients, report.infos, now);
    const state = this.presence.state();
    return {
      leave: answer.leave,
      askAgainAt: answer.askAgainAt,
      head: this.store.counter("last_seq"),
      presence: state.text,
      presenceVersion: state.version ?? 0,
      ...(members ? { pusher: members } : {}),
    };
  }

  /** `GET /v1/presence/{channel}`'s answer (docs/api.md, "Presence"). */
  presenceNow(): PresenceAnswer {
    return this.presence.answer();
  }

  /** Presence's mode now and its calls so far, for stats. */
  presenceStats(): { mode: "announce" | "interval"; sends_total: number } {
    return { mode: this.presence.answer().mode, sends_total: this.presence.sendsTotal };
  }

  /** The channel's alarm: presence's interval frame and its wake-ups of the relays. */
  presenceTick(now: number): void {
    this.presence.tick(now);
    this.pusher.tick(now);
  }

  /**
   * Retained frames with seq in (`after`, `upTo`], oldest first, up to `maxBytes` (at least one;
   * `more` when some were left out): a relay's repair of a hole and a joining subscriber's replay.
   */
  framesAfter(after: number, upTo: number, maxBytes: number): { frames: LiveFrame[]; more: boolean } {
    if (this.store.wiped) return { frames: [], more: false };
    const channel = this.store.channel ?? "";
    const epoch = this.store.epoch;
    const rows = this.store.sql.exec<MessageRow>(
      "SELECT seq, id, data, published_at, meta, priority FROM messages WHERE seq > ? AND seq <= ? ORDER BY seq ASC",
      after,
      upTo,
    );
    // Read lazily: rows past the bound are never loaded.
    function* frames(): Generator<LiveFrame> {
      for (const r of rows) yield liveFrame(channel, epoch, r);
    }
    return takeFrameBytes(frames(), Math.min(maxBytes, PAGE_MAX_BYTES));
  }

  /** Sends the messages appended by the last transaction to every active relay, on its own line. */
  fanOut(): void {
    const messages = this.store.takeLive();
    if (messages.length === 0) return;
    const active = this.relays.active();
    // No one listening (the analytics channel, usually): no frames to build.
    if (active.length === 0) return;
    const channel = this.store.channel ?? "";
    const epoch = this.store.epoch;
    const frames = messages.map((m) => liveFrame(channel, epoch, m));
    const head = this.store.counter("last_seq");
    for (const e of active) this.pipeTo(e.name).push(frames, head);
    // A wake-up soon after: if this instance is reset with frames still on a line, the next one
    // (its constructor) tells every relay the head, so a quiet channel's relays still repair.
    this.scheduler.request(Date.now() + RELAY_WAKE_MS);
  }

  /**
   * Side frames (summaries, presence: docs/api.md, "Side frames") to every active relay, on each
   * relay's line after the messages sent before them. Best effort: never stored, never repaired.
   */
  sendSide(frames: SideFrame[]): void {
    if (frames.length === 0) return;
    for (const e of this.relays.active()) this.pipeTo(e.name).pushSide(frames);
  }

  /**
   * Every active relay hears the head (at most once per {@link RELAY_PROBE_MS} unless `force`): each
   * wakes, and one reset since its last report reports its true counts from its constructor, while
   * an empty one is told to leave (src/relay/relay.ts).
   */
  probe(now: number, force = false): void {
    if (!force && now - this.lastProbe < RELAY_PROBE_MS) return;
    this.lastProbe = now;
    const head = this.store.counter("last_seq");
    for (const e of this.relays.active()) this.pipeTo(e.name).sync(head);
  }

  /** After a restart: each relay no batch has been sent to yet hears the head (see load). */
  private syncUnused(): void {
    const head = this.store.counter("last_seq");
    for (const e of this.relays.active()) {
      const pipe = this.pipeTo(e.name);
      if (!pipe.used) pipe.sync(head);
    }
  }

  private pipeTo(name: string): RelayPipe {
    return this.lines.to(name);
  }

  /** Inside a publish's transaction (src/channel/relay-lines.ts). */
  saveSends(): number {
    return this.lines.saveSends();
  }

  sendsSaved(n: number): void {
    this.lines.sendsSaved(n);
  }

  private save(e: RelayEntry): void {
    this.store.revive();
    this.store.sql.exec(
      "INSERT OR REPLACE INTO relays (name, grp, k, websockets, sse, clients) VALUES (?, ?, ?, ?, ?, ?)",
      e.name,
      e.group,
      e.k,
      e.websockets,
      e.sse,
      JSON.stringify([...e.clients]),
    );
  }

  /** Deleted with everything else (idle expiry): no relay is left on a line. */
  forget(): void {
    this.lines.clear();
    this.relays.clear();
    this.presence.reset();
    this.pusher.reset();
    this.readers.reset();
  }
}

/** `PRESENCE_ANNOUNCE_MAX` and `PRESENCE_INTERVAL`, as presence takes them. */
function presenceSettings(env: Env): PresenceSettings {
  const s = settingsOf(env);
  return { announceMax: s.presenceAnnounceMax, intervalMs: s.presenceIntervalMs };
}

/** A message's live frame, with a Pusher event's delivery details and a priority mark beside its text. */
function liveFrame(channel: string, epoch: string, m: MessageFields): LiveFrame {
  const f: LiveFrame = { seq: m.seq, epoch, text: frame(channel, epoch, m) };
  if (m.meta) f.meta = m.meta;
  // Relays that thin a subscriber pass a priority message whatever its rate (docs/api.md, "Each reader's rate").
  if (m.priority) f.priority = true;
  return f;
}

/** A stored column's JSON, or null when it does not parse (then it counts as nothing). */
function parseJson(text: string): unknown {
  try {
    return JSON.parse(text);
  } catch {
    return null;
  }
}
