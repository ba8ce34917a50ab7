/**
 * A channel's presence (docs/api.md, "Presence"): how many are here, and in a small room who. Built
 * from what the channel already hears from its relays — each relay's count report carries its open
 * subscriptions per client (`sub:<token sub>` or `ip:<address>`, src/channel/client-cap.ts) and the
 * reservations that joined — so presence adds no call from a relay, only what the channel sends:
 *
 * - **Announce mode** (occupancy ≤ `PRESENCE_ANNOUNCE_MAX`): a relay's report is compared with its
 *   previous one, and each subscription that came or went is one `join` or `leave` frame with its
 *   subject (null for an anonymous one) to every relay. Bounded: at most the threshold's subscribers.
 * - **Interval mode** (above it): reports only move the counts (`joined`, `left`); one `interval`
 *   frame per `PRESENCE_INTERVAL`, and only when something changed, goes to every relay. A join costs
 *   no frame of its own, so a crowd of any size costs each subscriber at most one frame per interval.
 * - **Crossing** the threshold sends one `state` frame in the new mode.
 *
 * Every frame goes as a side frame on the channel's line to each relay that has a subscriber taking
 * presence (src/channel/relays.ts): once per relay, never stored, never replayed. A new `presence=1` subscriber's first frame, the `state`
 * counting itself, comes from its relay, built here into the answer of the report of its join; the
 * frames numbered up to that state's version (its own join among them, still on the line) are
 * skipped for it, so nothing it was told is told twice.
 *
 * While subscribers take presence, the interval's alarm also wakes every relay (at most one call per
 * relay per interval): a relay reset or evicted since its last report reports its true counts, so
 * occupancy is right again within one interval.
 */
import { splitShardKey } from "../../functions/shard-key";
import type { AlarmScheduler } from "../platform/alarm-scheduler";
import { channelFields, type SideFrame } from "../wire/frame-text";

export type PresenceMode = "announce" | "interval";

/** `GET /v1/presence/{channel}`'s answer; `subjects` only in announce mode. */
export interface PresenceAnswer {
  channel: string;
  /** On a sharded channel: the caller's shard, whose audience this is (docs/api.md, "Shards"). */
  shard?: string;
  occupancy: number;
  mode: PresenceMode;
  subjects?: string[];
}

/** The two settings (`PRESENCE_ANNOUNCE_MAX`, `PRESENCE_INTERVAL`). */
export interface PresenceSettings {
  announceMax: number;
  intervalMs: number;
}

/** What presence needs of the channel's relays. */
export interface PresenceRelays {
  channel(): string;
  /** Open subscriptions of every relay (reserved slots not counted: nobody is there yet). */
  occupancy(): number;
  /** Per-client counts of every relay. */
  clientMaps(): Iterable<Map<string, number>>;
  /** Side frames on the lines to these relays (src/channel/relays.ts). */
  send(frames: SideFrame[], relays: Iterable<string>): void;
  /** Wakes every relay (a reset one reports its true counts); answers how many. */
  probe(now: number): number;
}

/** One relay's view before and after its report. */
export interface RelaySide {
  count: number;
  clients: Map<string, number>;
}

const SUBJECT_PREFIX = "sub:";

export class ChannelPresence {
  /** Joins and leaves since the last interval frame (or the last crossing). */
  private joined = 0;
  private left = 0;
  /** When the last interval frame went (epoch ms). */
  private lastIntervalAt = 0;
  /** When the next interval frame is due, or null when nothing is waiting. */
  private dueAt: number | null = null;
  /** Subscribers taking presence per relay, as last reported (memory only). */
  private readonly watchers = new Map<string, number>();
  /** The version of the last presence frame sent (see {@link SideFrame.version}); never goes back. */
  private version = 0;
  /**
   * Relay lines given presence frames, and relays woken for presence, since this instance started
   * (memory only): what presence costs the channel, in `stats` as `presence.sends_total`.
   */
  sendsTotal = 0;
  /** When every relay is next woken while subscribers take presence, or null when none does. */
  private watchAt: number | null = null;

  constructor(
    private readonly relays: PresenceRelays,
    private readonly scheduler: AlarmScheduler,
    private readonly settings: () => PresenceSettings,
  ) {}

  modeOf(occupancy: number): PresenceMode {
    return occupancy <= this.settings().announceMax ? "announce" : "interval";
  }

  /** The route's answer: live counts, subjects only in announce mode (at most the threshold of them). */
  answer(): PresenceAnswer {
    const occupancy = this.relays.occupancy();
    const mode = this.modeOf(occupancy);
    // A shard's object answers for its channel and its shard (functions/shard-key.ts).
    const { channel, shard } = splitShardKey(this.relays.channel());
    const base = { channel, ...(shard === null ? {} : { shard }), occupancy, mode };
    return mode === "announce" ? { ...base, subjects: this.subjects() } : base;
  }

  /** The `state` frame as of now: it counts every frame sent so far (their versions are ≤ its). */
  state(): SideFrame {
    const a = this.answer();
    const subjects = a.subjects ? `,"subjects":${JSON.stringify(a.subjects)}` : "";
    return {
      event: "presence",
      text: `{"type":"presence",${channelFields(this.relays.channel())},"action":"state","occupancy":${a.occupancy}${subjects}}`,
      version: this.version,
    };
  }

  /** Frames numbered in order and sent to every relay. Time-based, so a restarted channel never goes back. */
  private send(texts: string[]): void {
    const frames = texts.map((text) => {
      this.version = Math.max(this.version + 1, Date.now() * 1000);
      return { event: "presence" as const, text, version: this.version };
    });
    // Only relays with a subscriber that takes presence: the others would drop them.
    if (this.watchers.size === 0) return;
    this.relays.send(frames, this.watchers.keys());
    this.sendsTotal += this.watchers.size;
  }

  /**
   * One relay's report was taken (`before` → `after`; `joined`: the subscriptions it says joined,
   * `watching`: its subscribers taking presence). The channel's occupancy already counts `after`.
   */
  reported(relay: string, before: RelaySide, after: RelaySide, joined: number, watching: number, now: number): void {
    if (watching > 0) this.watchers.set(relay, watching);
    else this.watchers.delete(relay);
    this.keepWatching(now);
    const occupancy = this.relays.occupancy();
    const was = this.modeOf(occupancy - (after.count - before.count));
    const is = this.modeOf(occupancy);
    if (was !== is) {
      this.joined = 0;
      this.left = 0;
      this.dueAt = null;
      // The state is the latest news: the first interval frame comes one interval after it.
      this.lastIntervalAt = now;
      this.send([this.state().text]);
      return;
    }
    if (is === "announce") {
      this.announce(before, after, occupancy);
      return;
    }
    // Interval mode: counts only. A count that moved more than the joins explain is subscriptions
    // the channel never heard join (a relay it did not know); less is subscriptions gone.
    const gone = before.count + joined - after.count;
    this.joined += gone >= 0 ? joined : joined - gone;
    this.left += Math.max(0, gone);
    if (this.joined + this.left > 0 && this.dueAt === null) {
      this.dueAt = Math.max(now, this.lastIntervalAt + this.settings().intervalMs);
      this.scheduler.request(this.dueAt);
    }
  }

  /** The relay left the channel (reported empty): it takes no presence any more. */
  forgetRelay(relay: string): void {
    this.watchers.delete(relay);
  }

  /**
   * The channel's alarm at `now`: the interval frame when due and something changed, and while
   * anyone takes presence, every relay woken once per interval.
   */
  tick(now: number): void {
    if (this.dueAt !== null && now >= this.dueAt) {
      this.dueAt = null;
      const occupancy = this.relays.occupancy();
      if (this.modeOf(occupancy) === "interval" && this.joined + this.left > 0) {
        this.send([
          `{"type":"presence",${channelFields(this.relays.channel())},"action":"interval","occupancy":${occupancy},"joined":${this.joined},"left":${this.left}}`,
        ]);
        this.lastIntervalAt = now;
      }
      this.joined = 0;
      this.left = 0;
    } else if (this.dueAt !== null) {
      this.scheduler.request(this.dueAt);
    }
    this.keepWatching(now);
  }

  /** Deleted with everything else (idle expiry). */
  reset(): void {
    this.joined = 0;
    this.left = 0;
    this.dueAt = null;
    this.lastIntervalAt = 0;
    this.watchers.clear();
    this.watchAt = null;
  }

  /** Subjects of every relay, sorted and distinct; anonymous subscribers are never listed. */
  private subjects(): string[] {
    const out = new Set<string>();
    for (const clients of this.relays.clientMaps()) {
      for (const key of clients.keys()) if (key.startsWith(SUBJECT_PREFIX)) out.add(key.slice(SUBJECT_PREFIX.length));
    }
    return [...out].sort();
  }

  /** One frame per subscription that went, then per one that came, each with the occupancy after it. */
  private announce(before: RelaySide, after: RelaySide, occupancy: number): void {
    const channel = channelFields(this.relays.channel());
    const leaves: (string | null)[] = [];
    const joins: (string | null)[] = [];
    for (const key of new Set([...before.clients.keys(), ...after.clients.keys()])) {
      const delta = (after.clients.get(key) ?? 0) - (before.clients.get(key) ?? 0);
      const subject = key.startsWith(SUBJECT_PREFIX) ? key.slice(SUBJECT_PREFIX.length) : null;
      for (let i = 0; i < -delta; i++) leaves.push(subject);
      for (let i = 0; i < delta; i++) joins.push(subject);
    }
    if (leaves.length + joins.length === 0) return;
    let n = occupancy - joins.length + leaves.length;
    const texts: string[] = [];
    const one = (action: "join" | "leave", subject: string | null) => {
      n += action === "join" ? 1 : -1;
      texts.push(
        `{"type":"presence",${channel},"action":"${action}","subject":${JSON.stringify(subject)},"occupancy":${Math.max(0, n)}}`,
      );
    };
    for (const s of leaves) one("leave", s);
    for (const s of joins) one("join", s);
    this.send(texts);
  }

  /** While some relay has subscribers taking presence, the alarm comes back within one interval. */
  private keepWatching(now: number): void {
    if (this.watchers.size === 0) {
      this.watchAt = null;
      return;
    }
    if (this.watchAt === null || now >= this.watchAt) {
      if (this.watchAt !== null) this.sendsTotal += this.relays.probe(now);
      this.watchAt = now + this.settings().intervalMs;
    }
    this.scheduler.request(this.watchAt);
  }
}
