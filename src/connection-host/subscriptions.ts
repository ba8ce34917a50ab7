/**
 * A connection's subscriptions (docs/api.md, "The Pusher door"): `pusher:subscribe` and
 * `pusher:unsubscribe`, checked in order — the name (one Floodgate does not serve, `private-encrypted-`
 * or invalid, 403), a private or presence channel on a connection that may make public reads only
 * (a page on an origin admitted only by `CORS_ORIGINS=*`, 403), the connection's 100 channels and
 * its subscribe budget (429), the signature of a private or presence channel (401; on a presence
 * channel it must sign `channel_data`), the client IP's read budget for a subscribe with no signature
 * that verifies — a public channel, or a bad or missing signature — (429; 503 when the limiter fails:
 * ./host-reads.ts), and a presence member's `channel_data` (403: signed, but not a
 * member Floodgate takes) — then room on the host for a channel it does not serve yet (503 past its
 * lanes: ./lane-room.ts), a slot reserved on the channel, which refuses past `MAX_SUBSCRIBERS`
 * (503) or the client's `MAX_SUBSCRIPTIONS_PER_CLIENT` (429), then the lane joined (./lane.ts).
 * Every refusal is a `pusher:subscription_error` on that channel, so the client's channel hears it,
 * and changes nothing else.
 */
import { shardKey } from "../../functions/shard-key";
import type { RelaySlot } from "../channel/calls";
import { type BucketState, fullBucket, take } from "../limiter/token-bucket";
import { HOST_FULL_REASON } from "../metrics/series";
import { shardRuleFor } from "../settings/rules";
import type { Settings } from "../settings/settings";
import { DEFAULT_SHARD } from "../settings/shards";
import { parseChannelName } from "../wire/channel-names";
import type { UnavailableReason } from "../wire/errors";
import { readChannelData } from "../wire/pusher/client-frames";
import { PUSHER_MAX_CHANNELS, PUSHER_USER_INFO_MAX_BYTES } from "../wire/pusher/codes";
import { subscriptionSucceeded } from "../wire/pusher/frames";
import { checkPusherName, isPresence, memberKey, pusherChannel, pusherVisibility } from "../wire/pusher/names";
import { channelAuthValid } from "../wire/pusher/signatures";
import type { ConnectionAttachment } from "./connections";
import type { HostReads } from "./host-reads";
import type { HostLane, LaneSub } from "./lane";
import type { LaneRoom } from "./lane-room";

/** What subscribing needs of the host. */
export interface SubscribingHost {
  settings(): Settings;
  identity(): { name: string; group: string; k: number } | null;
  attachment(ws: WebSocket): ConnectionAttachment | null;
  /** The lane of a channel key, made when it has none. */
  lane(key: string, name: string): HostLane;
  existingLane(key: string): HostLane | undefined;
  /** Room for the lanes a subscribe may open. */
  readonly laneRoom: Pick<LaneRoom, "take">;
  reserve(key: string, client: string, visibility: "public" | "private"): Promise<RelaySlot>;
  send(ws: WebSocket, text: string): void;
  /**
   * A `pusher:subscription_error`; a 429 or 503 names the bound it met (`named`: a 429's bucket, a
   * 503's reason, as `floodgate_refusals_total` counts it; a 503 that names none is `unavailable`).
   */
  subscriptionError(ws: WebSocket, channel: string, status: number, type: string, error: string, named?: string): void;
  storeSubscription(socketId: string, key: string, sub: LaneSub): void;
  deleteSubscription(socketId: string, key: string): void;
  subscribed(n: number): void;
}

/** A subscribe that passed every check: what its reservation and its lane need. */
interface Joining {
  /** The Pusher name. */
  channel: string;
  /** The channel object's key. */
  key: string;
  socketId: string;
  /** The key the channel counts it under (./lane.ts `LaneSub`). */
  client: string;
  visibility: "public" | "private";
  userId: string | null;
  userInfo: string | null;
}

export class HostSubscriptions {
  /** Each socket's subscriptions, by Pusher name → channel key. */
  private readonly bySocket = new Map<WebSocket, Map<string, string>>();
  /** Each connection's subscribe budget (memory only: a hibernated connection's is full again). */
  private readonly budgets = new WeakMap<WebSocket, BucketState>();

  constructor(
    private readonly reads: HostReads,
    private readonly host: SubscribingHost,
  ) {}

  /** After a restart: a stored subscription of a socket. */
  restore(ws: WebSocket, name: string, key: string): void {
    this.of(ws).set(name, key);
  }

  channelsOf(ws: WebSocket): Map<string, string> {
    return this.bySocket.get(ws) ?? new Map();
  }

  /** `pusher:subscribe`. */
  async subscribe(ws: WebSocket, channel: string, auth: string | null, channelData: string | null): Promise<void> {
    const host = this.host;
    // Refused on that channel, not the connection: pusher-js would otherwise leave it pending.
    const problem = checkPusherName(channel);
    if (problem) return host.subscriptionError(ws, channel, 403, "AuthError", problem);
    const a = host.attachment(ws);
    const id = host.identity();
    if (!a || !id) return;
    if (a.publicOnly && pusherVisibility(channel) === "private") {
      // Even with a good signature: a page on any site could get one from the app's auth endpoint.
      return host.subscriptionError(
        ws,
        channel,
        403,
        "AuthError",
        "this connection comes from a page on an origin CORS_ORIGINS admits for public channels only",
      );
    }
    const mine = this.of(ws);
    if (this.heldOrFull(ws, mine, channel)) return;
    const settings = host.settings();
    if (!this.budgetAllows(ws, settings)) {
      return host.subscriptionError(
        ws,
        channel,
        429,
        "LimitReached",
        "subscribe rate limit exceeded on this connection",
        "subscribe",
      );
    }
    let userId: string | null = null;
    let userInfo: string | null = null;
    const app = settings.pusher.app;
    const floodgate = parseChannelName(pusherChannel(channel));
    if (floodgate.visibility === "private") {
      const presence = isPresence(channel);
      // A presence signature covers channel_data: without it there is nothing that could match.
      const data = presence ? channelData : null;
      if (!app || (presence && data === null) || !(await channelAuthValid(app, a.id, channel, data, auth))) {
        // A missing or bad signature is the native door's missing or bad token: a read all the same (docs/api.md, "Bounds").
        if (!(await this.readAllowed(ws, channel, a.client, settings))) return;
        const signs = presence ? "<socket_id>:<channel>:<channel_data>" : "<socket_id>:<channel>";
        return host.subscriptionError(ws, channel, 401, "AuthError", `invalid signature: auth must sign ${signs}`);
      }
      if (presence) {
        // Signed by the app, so not a 401; but not a member Floodgate takes (no user_id, user_info over 1 KiB).
        const member = readChannelData(channelData ?? "", PUSHER_USER_INFO_MAX_BYTES);
        if ("problem" in member) return host.subscriptionError(ws, channel, 403, "AuthError", member.problem);
        userId = member.userId;
        userInfo = member.userInfo;
      }
    } else if (!(await this.readAllowed(ws, channel, a.client, settings))) {
      return;
    }
    // Checked again: other subscribes of this connection went on while this one waited.
    if (this.heldOrFull(ws, mine, channel)) return;
    // A channel sharded by continent (docs/api.md, "Shards"): the connection's continent's shard.
    const rule = shardRuleFor(settings, floodgate);
    const key = rule ? shardKey(floodgate.name, a.continent ?? DEFAULT_SHARD) : floodgate.name;
    const client = userId === null ? a.client : memberKey(userId);
    const release = host.laneRoom.take(key);
    if (!release) {
      // Reconnecting is the remedy: the directory counts this host full and places it elsewhere.
      return host.subscriptionError(
        ws,
        channel,
        503,
        "Unavailable",
        "this connection's host serves as many channels as it can; reconnect",
        HOST_FULL_REASON,
      );
    }
    try {
      await this.join(ws, mine, {
        channel,
        key,
        socketId: a.id,
        client,
        visibility: floodgate.visibility,
        userId,
        userInfo,
      });
    } finally {
      release();
    }
  }

  /** The slot reserved on the channel, then the lane joined; each refusal that channel's error. */
  private async join(ws: WebSocket, mine: Map<string, string>, j: Joining): Promise<void> {
    const { channel, key, socketId, client, visibility, userId, userInfo } = j;
    const host = this.host;
    mine.set(channel, key); // held while the slot is reserved: a second subscribe waits for this one
    let slot: RelaySlot;
    try {
      slot = await host.reserve(key, client, visibility);
    } catch (e) {
      console.error("floodgate host: could not reserve a subscription", e instanceof Error ? e.message : e);
      mine.delete(channel);
      return host.subscriptionError(ws, channel, 503, "Unavailable", "the channel is temporarily unavailable; retry");
    }
    if (!("relay" in slot)) {
      mine.delete(channel);
      const refused = slotRefusal(slot);
      return host.subscriptionError(ws, channel, refused.status, refused.type, refused.error, refused.named);
    }
    const sub: LaneSub = { socketId, client, floor: slot.head, userId, userInfo, joining: true, skipUpTo: 0 };
    host.storeSubscription(socketId, key, sub);
    const lane = host.lane(key, channel);
    if (!(await lane.join(ws, sub, slot.reservation, slot.head))) {
      if (mine.get(channel) === key) mine.delete(channel);
      host.deleteSubscription(socketId, key);
      return host.subscriptionError(ws, channel, 503, "Unavailable", "the channel is temporarily unavailable; retry");
    }
    host.subscribed(1);
    // Unsubscribed, or closed, while it joined: it ends now.
    if (this.bySocket.get(ws)?.get(channel) !== key) this.end(ws, key);
  }

  /** `pusher:unsubscribe`: that subscription ends; unknown channels change nothing. */
  unsubscribe(ws: WebSocket, channel: string): void {
    const mine = this.bySocket.get(ws);
    const key = mine?.get(channel);
    if (!mine || key === undefined) return;
    mine.delete(channel);
    this.end(ws, key);
  }

  /** The connection closed: every subscription ends. Answers how many did. */
  dropConnection(ws: WebSocket): number {
    const mine = this.bySocket.get(ws);
    this.bySocket.delete(ws);
    let ended = 0;
    for (const key of mine?.values() ?? []) if (this.end(ws, key)) ended++;
    return ended;
  }

  /** Answers whether a subscription was on the lane (and so ended now). */
  private end(ws: WebSocket, key: string): boolean {
    const lane = this.host.existingLane(key);
    const id = this.host.attachment(ws)?.id;
    if (id !== undefined) this.host.deleteSubscription(id, key);
    if (!lane?.leave(ws)) return false;
    this.host.subscribed(-1);
    return true;
  }

  /**
   * Answers a subscribe to a channel the connection holds already (answered again, nothing counted
   * twice) or one past its 100 channels (429), and says so.
   */
  private heldOrFull(ws: WebSocket, mine: Map<string, string>, channel: string): boolean {
    if (mine.has(channel)) {
      if (!isPresence(channel)) this.host.send(ws, subscriptionSucceeded(channel));
      return true;
    }
    if (mine.size < PUSHER_MAX_CHANNELS) return false;
    this.host.subscriptionError(
      ws,
      channel,
      429,
      "LimitReached",
      `a connection holds at most ${PUSHER_MAX_CHANNELS} channels`,
      "connection-channels",
    );
    return true;
  }

  /**
   * Takes one token from the client IP's read budget (./host-reads.ts); refused, answers that
   * channel's subscription_error: 429 as the native door's `read` refusal, 503 when the limiter failed.
   */
  private async readAllowed(ws: WebSocket, channel: string, client: string, settings: Settings): Promise<boolean> {
    const charged = await this.reads.take(settings, client);
    if (charged === "allowed") return true;
    if (charged === "denied")
      this.host.subscriptionError(ws, channel, 429, "LimitReached", "read rate limit exceeded", "read");
    else
      this.host.subscriptionError(
        ws,
        channel,
        503,
        "Unavailable",
        "the rate limiter is temporarily unavailable; retry",
      );
    return false;
  }

  private of(ws: WebSocket): Map<string, string> {
    let m = this.bySocket.get(ws);
    if (!m) {
      m = new Map();
      this.bySocket.set(ws, m);
    }
    return m;
  }

  /**
   * A connection's subscribes: up to {@link PUSHER_MAX_CHANNELS} at once (what an app subscribing on
   * connect needs), then `SUBSCRIBE_RATE` per second; no budget when it is disabled.
   */
  private budgetAllows(ws: WebSocket, settings: Settings): boolean {
    const rate = settings.subscribe;
    if (!rate) return true;
    const limit = { ...rate, burst: Math.max(rate.burst, PUSHER_MAX_CHANNELS) };
    const now = Date.now();
    const d = take(this.budgets.get(ws) ?? fullBucket(limit, now), limit, now);
    this.budgets.set(ws, d.state);
    return d.allowed;
  }
}

/**
 * The `pusher:subscription_error` of a slot the channel refused: its client's cap, its /48's (429),
 * or the channel full or its anonymous share taken (503), each named as the native door names it
 * (docs/api.md, "Relays"): bucket `subscriptions` for both caps, `max_subscribers` and
 * `anonymous_subscribers` for the 503s.
 */
function slotRefusal(slot: Exclude<RelaySlot, { relay: string }>): {
  status: number;
  type: string;
  error: string;
  named: string;
} {
  if ("clientFull" in slot)
    return {
      status: 429,
      type: "LimitReached",
      error: "too many subscriptions of this channel for one client",
      named: "subscriptions",
    };
  if ("netFull" in slot)
    return {
      status: 429,
      type: "LimitReached",
      error: "too many subscriptions of this channel from one network (IPv6 /48)",
      named: "subscriptions",
    };
  const named: UnavailableReason = "anonymousFull" in slot ? "anonymous_subscribers" : "max_subscribers";
  return { status: 503, type: "ChannelFull", error: "the channel has as many subscribers as it serves", named };
}
