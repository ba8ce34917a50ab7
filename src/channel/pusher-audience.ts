/**
 * A channel's Pusher subscribers as the channel sees them (docs/api.md, "The Pusher door"): presence
 * members and the size frames. Built, like presence (src/channel/presence.ts), from what connection
 * hosts already report as relays (src/connection-host/): a presence subscription is counted under the
 * client key `user:<user_id>`, so a host's per-client counts are its members, and the channel keeps
 * each member's total over every host incrementally — a user with two connections counts once.
 *
 * - **Members** (presence channels): a user whose total goes from 0 is `member_added`, to 0
 *   `member_removed`, sent as Pusher frames to every host on the channel's lines while the channel
 *   has at most `PRESENCE_ANNOUNCE_MAX` members; above it none (presence's cost bound, docs/api.md "Presence": no work per subscriber
 *   per join). A host's report answer carries the set a joining connection is sent in
 *   `subscription_succeeded` (empty above the bound, with the count), and a version: frames numbered
 *   up to it are already in that set, so the joiner skips them.
 * - **user_info** comes once per member and host (a host sends what it has not sent on that lane);
 *   the channel keeps at most {@link INFO_KEPT}, and asks a host for them again (`needInfo`) when a
 *   set it must answer lacks one.
 * - **Size**: above `PRESENCE_ANNOUNCE_MAX` subscribers (either door) every host gets
 *   `pusher_internal:subscription_count` at most once per `PRESENCE_INTERVAL`, only when it changed.
 * - **Listed**: the channel notes in the list of occupied channels (src/active-channels/
 *   pusher-channels.ts) when it gains its first subscriber or loses its last, and a presence
 *   channel's member count at most once per {@link LIST_NOTE_MS}: one call in flight, the latest
 *   state next.
 */
import type { AlarmScheduler } from "../platform/alarm-scheduler";
import type { SideFrame } from "../wire/frame-text";
import { memberAdded, memberRemoved, presenceSet, subscriptionCount } from "../wire/pusher/frames";
import { isPresence, MEMBER_PREFIX, pusherName } from "../wire/pusher/names";
import type { PresenceSettings } from "./presence";

/** Most `user_info`s a channel keeps: the largest set it ever answers (`PRESENCE_ANNOUNCE_MAX` ≤ 1,000). */
export const INFO_KEPT = 1000;

/** What the audience needs of the channel's relays. */
export interface AudienceRelays {
  /** The channel object's key. */
  channel(): string;
  /** Subscribers of every relay and host. */
  occupancy(): number;
  /** The active connection hosts' names. */
  hosts(): string[];
  /** Pusher frames on the lines to these hosts. */
  send(frames: SideFrame[], hosts: Iterable<string>): void;
  /** Notes the channel's subscribers and members where `GET /apps/{id}/channels` lists them. */
  list(channel: string, subscriptions: number, users: number): Promise<void>;
}

/** Least time between two notes of a channel's member count in the list of occupied channels. */
export const LIST_NOTE_MS = 1000;

/** What a host's report is answered on a presence channel. */
export interface MembersAnswer {
  /** `{"presence":{"ids","hash","count"}}` as of this report. */
  set: string;
  /** Member frames up to this version are counted in `set`. */
  version: number;
  /** Send every member's `user_info` again with the next report. */
  needInfo?: true;
}

export class PusherAudience {
  /** Each member's open subscriptions over every host. */
  private readonly members = new Map<string, number>();
  private readonly infos = new Map<string, string | null>();
  private version = 0;
  private lastCount: number | null = null;
  private lastCountAt = 0;
  private countDueAt: number | null = null;
  /** What the list of occupied channels last heard ([subscriptions > 0, users]), and the note on its way. */
  private listed: [boolean, number] = [false, 0];
  private listing: Promise<void> | null = null;
  private listAgain = false;
  private lastListAt = 0;

  constructor(
    private readonly relays: AudienceRelays,
    private readonly scheduler: AlarmScheduler,
    private readonly settings: () => PresenceSettings,
  ) {}

  /** After a restart: members from the stored per-client counts of every relay. */
  load(clientMaps: Iterable<Map<string, number>>): void {
    this.members.clear();
    for (const clients of clientMaps) this.add(clients, 1);
  }

  /** The name of this channel in the Pusher protocol, or null when it is not a `pusher:` channel. */
  private name(): string | null {
    return pusherName(this.relays.channel());
  }

  /**
   * One relay's report was taken (`before` → `after`, its per-client counts), with the `user_info`s a
   * host sent. Answers, on a presence channel, the set a joiner is sent.
   */
  reported(
    before: Map<string, number>,
    after: Map<string, number>,
    infos: [string, string | null][] | undefined,
    now: number,
  ): MembersAnswer | undefined {
    const name = this.name();
    if (name === null) return undefined;
    this.scheduleCount(now);
    if (!isPresence(name)) {
      this.noteListed(now);
      return undefined;
    }
    for (const [id, info] of infos ?? []) {
      if (this.infos.has(id) || this.infos.size < INFO_KEPT) this.infos.set(id, info);
    }
    const added: string[] = [];
    const removed: string[] = [];
    for (const key of new Set([...before.keys(), ...after.keys()])) {
      if (!key.startsWith(MEMBER_PREFIX)) continue;
      const delta = (after.get(key) ?? 0) - (before.get(key) ?? 0);
      if (delta === 0) continue;
      const id = key.slice(MEMBER_PREFIX.length);
      const was = this.members.get(id) ?? 0;
      const is = Math.max(0, was + delta);
      if (is === 0) this.members.delete(id);
      else this.members.set(id, is);
      if (was === 0 && is > 0) added.push(id);
      if (was > 0 && is === 0) {
        removed.push(id);
        this.infos.delete(id);
      }
    }
    this.noteListed(now);
    const announce = this.members.size <= this.settings().announceMax;
    if (announce && added.length + removed.length > 0) {
      this.send([
        ...removed.map((id) => memberRemoved(name, id)),
        ...added.map((id) => memberAdded(name, id, this.infos.get(id) ?? null)),
      ]);
    }
    const members = announce ? [...this.members.keys()] : [];
    const needInfo = members.some((id) => !this.infos.has(id));
    return {
      set: presenceSet(
        members.map((id) => [id, this.infos.get(id) ?? null]),
        this.members.size,
      ),
      version: this.version,
      ...(needInfo ? { needInfo: true as const } : {}),
    };
  }

  /** Distinct members (`user_count`). */
  get memberCount(): number {
    return this.members.size;
  }

  /** Members' ids, at most `limit` (the HTTP API's `users`). */
  memberIds(limit: number): string[] {
    return [...this.members.keys()].slice(0, limit);
  }

  /** The channel's alarm: the size frame when due. */
  tick(now: number): void {
    if (this.countDueAt === null) return;
    if (now < this.countDueAt) {
      this.scheduler.request(this.countDueAt);
      return;
    }
    this.countDueAt = null;
    const name = this.name();
    const occupancy = this.relays.occupancy();
    if (name === null || occupancy <= this.settings().announceMax || occupancy === this.lastCount) return;
    this.lastCount = occupancy;
    this.lastCountAt = now;
    this.send([subscriptionCount(name, occupancy)]);
  }

  /**
   * The list of occupied channels hears a change: at once when the channel gained its first
   * subscriber or lost its last, else (a member count) at most once per {@link LIST_NOTE_MS}.
   */
  private noteListed(now: number): void {
    if (this.listing) {
      this.listAgain = true;
      return;
    }
    const occupancy = this.relays.occupancy();
    const state: [boolean, number] = [occupancy > 0, this.members.size];
    if (state[0] === this.listed[0] && state[1] === this.listed[1]) return;
    if (state[0] === this.listed[0] && now - this.lastListAt < LIST_NOTE_MS) {
      this.listAgain = true;
      setTimeout(() => this.noteAgain(), LIST_NOTE_MS - (now - this.lastListAt));
      return;
    }
    this.lastListAt = now;
    const channel = this.relays.channel();
    this.listing = this.relays.list(channel, occupancy, this.members.size).then(
      () => {
        this.listed = state;
      },
      (e: unknown) =>
        console.error("floodgate: could not note an occupied Pusher channel", e instanceof Error ? e.message : e),
    );
    this.listing.finally(() => {
      this.listing = null;
      this.noteAgain();
    });
  }

  private noteAgain(): void {
    if (!this.listAgain || this.listing) return;
    this.listAgain = false;
    this.noteListed(Date.now());
  }

  /** Deleted with everything else (idle expiry). */
  reset(): void {
    if (this.listed[0] && this.name() !== null) {
      this.relays.list(this.relays.channel(), 0, 0).catch(() => {});
    }
    this.listed = [false, 0];
    this.members.clear();
    this.infos.clear();
    this.lastCount = null;
    this.lastCountAt = 0;
    this.countDueAt = null;
  }

  /** Above the threshold, a changed size is told at the next interval (at once the first time). */
  private scheduleCount(now: number): void {
    if (this.countDueAt !== null) return;
    const occupancy = this.relays.occupancy();
    if (occupancy <= this.settings().announceMax || occupancy === this.lastCount) return;
    if (this.relays.hosts().length === 0) return;
    this.countDueAt = Math.max(now, this.lastCountAt + this.settings().intervalMs);
    this.scheduler.request(this.countDueAt);
  }

  private add(clients: Map<string, number>, sign: number): void {
    for (const [key, n] of clients) {
      if (!key.startsWith(MEMBER_PREFIX)) continue;
      const id = key.slice(MEMBER_PREFIX.length);
      this.members.set(id, (this.members.get(id) ?? 0) + sign * n);
    }
  }

  /** Pusher frames, numbered, to every host on the channel. */
  private send(texts: string[]): void {
    const hosts = this.relays.hosts();
    const frames = texts.map((text) => {
      this.version = Math.max(this.version + 1, Date.now() * 1000);
      return { event: "pusher" as const, text, version: this.version };
    });
    if (hosts.length > 0 && frames.length > 0) this.relays.send(frames, hosts);
  }
}
