/**
 * What a relay (src/relay/relay.ts) exchanges with the Worker and with its channel, typed: the
 * Worker's subscribe call (a request, since a WebSocket upgrade cannot travel by RPC, encoded and
 * decoded here on both sides), the channel's deliveries, and the count reports the relay sends its
 * channel with their answers. The channel's object implements `relayReport` and `framesAfter` for it
 * (src/channel/channel-object.ts); the relay reaches it through platform/stubs' `channelStub`.
 */
import type { LiveFrame } from "../wire/frame-text";
import { type ReaderRate, rateText, readRateText } from "./reader-rate";

/** One subscriber the Worker hands a relay, already authorised and holding a slot from the channel. */
export interface RelaySubscribe {
  /** The channel object's key (a shard's key on a sharded channel). */
  channel: string;
  /** This relay's name and place (src/relay/placement.ts). */
  relay: string;
  group: string;
  k: number;
  /** The slot the channel reserved for this subscriber. */
  reservation: string;
  /** Whose subscription it is (src/channel/client-cap.ts `clientKey`). */
  client: string;
  /** The lease the client's connection ledger gave it (src/connection-ledger/), reported when it joins. */
  lease: string;
  mode: "ws" | "sse";
  /** A WebSocket that asked for packed frames (`?batch=1`). */
  batch: boolean;
  /** A subscriber that takes presence frames (`?presence=1`): its channel's `state` follows its replay. */
  presence: boolean;
  /** The channel's head seq when the slot was taken. */
  head: number;
  /** Where its stream starts: the resume point (`?after=`), at most `head`. */
  floor: number;
  /** The channel's epoch when the slot was taken (docs/api.md, "Numbering restarts"), for its expired frame. */
  epoch?: string;
  /** When its token expires (epoch ms): the relay ends it then. Null: anonymous. */
  expiresAt: number | null;
  /** Its token's session (`sid`): the relay ends it when the session is revoked (src/relay/revocations.ts). */
  sid?: string | null;
  /** Its own rate (`?max_rate=`, src/relay/reader-rate.ts), or null: as fast as it reads. */
  maxRate?: ReaderRate | null;
}

const SUBSCRIBE_URL = "https://relay.internal/subscribe";

/** The request the Worker sends the relay for `s`, carrying the subscriber's own (for its upgrade). */
export function subscribeRequest(s: RelaySubscribe, original: Request): Request {
  const url = new URL(SUBSCRIBE_URL);
  const q = url.searchParams;
  q.set("channel", s.channel);
  q.set("relay", s.relay);
  q.set("group", s.group);
  q.set("k", String(s.k));
  q.set("reservation", s.reservation);
  q.set("client", s.client);
  q.set("lease", s.lease);
  q.set("mode", s.mode);
  if (s.batch) q.set("batch", "1");
  if (s.presence) q.set("presence", "1");
  q.set("head", String(s.head));
  q.set("floor", String(s.floor));
  if (s.epoch) q.set("epoch", s.epoch);
  if (s.expiresAt !== null) q.set("expires", String(s.expiresAt));
  if (s.sid) q.set("sid", s.sid);
  if (s.maxRate) q.set("max_rate", rateText(s.maxRate));
  return new Request(url, original);
}

/** The subscriber a {@link subscribeRequest} carries. */
export function readSubscribe(request: Request): RelaySubscribe {
  const q = new URL(request.url).searchParams;
  const head = Number(q.get("head"));
  const expires = Number(q.get("expires") ?? Number.NaN);
  return {
    channel: q.get("channel") ?? "",
    relay: q.get("relay") ?? "",
    group: q.get("group") ?? "",
    k: Number(q.get("k")),
    reservation: q.get("reservation") ?? "",
    client: q.get("client") ?? "",
    lease: q.get("lease") ?? "",
    mode: q.get("mode") === "ws" ? "ws" : "sse",
    batch: q.get("batch") === "1",
    presence: q.get("presence") === "1",
    head,
    floor: Math.min(Number(q.get("floor")), head),
    ...(q.get("epoch") ? { epoch: q.get("epoch") as string } : {}),
    expiresAt: Number.isFinite(expires) ? expires : null,
    sid: q.get("sid"),
    maxRate: readRateText(q.get("max_rate")),
  };
}

/**
 * The status a relay answers a subscribe it could not take (its channel did not hear the join): the
 * Worker answers the subscriber 503, in the API's error shape.
 */
export const RELAY_REFUSED_STATUS = 503;

/** A relay's counts, as its stats show them. */
export interface RelayCounts {
  websockets: number;
  sse: number;
  /** The last seq this relay sent its subscribers, or null when it holds none and knows none. */
  last_seq: number | null;
}

/** What a relay tells its channel after a change (src/relay/reporter.ts). */
export interface RelayReport {
  relay: string;
  group: string;
  k: number;
  websockets: number;
  sse: number;
  /** Open subscriptions per client key (every one of the relay's, in one report). */
  clients: [string, number][];
  /** Reservations of the subscribers that joined since the last report. */
  joined: string[];
  /** Subscribers closed for falling too far behind since the last report. */
  slowClosed: number;
  /** Subscribers that take presence frames (`?presence=1`, src/channel/presence.ts). */
  presence?: number;
  /**
   * A connection host on a Pusher presence channel (src/channel/pusher-audience.ts): members'
   * `user_info` as JSON text (null: none given) that it has not sent on this channel before.
   */
  infos?: [string, string | null][];
  /** Subscribers thinned now: with a `max_rate`, or for reading too slowly (src/channel/readers.ts). */
  thinned?: number;
  /** Messages skipped for its subscribers since the last report (src/channel/readers.ts). */
  skipped?: number;
}

/** What a relay's report is answered: whether to leave (it is empty), and the channel's head seq. */
export interface RelayReportAnswer {
  leave: boolean;
  head: number;
  /**
   * Empty, yet kept: a slot is still reserved on it for a subscriber that has not arrived (and may
   * never: its client went away on the way). When the last such slot lapses (epoch ms): the relay
   * reports again then, so a relay or lane on a quiet channel does not stay on for nobody.
   */
  askAgainAt?: number;
  /**
   * The presence `state` frame as of this report (docs/api.md, "Presence"): what a subscriber that
   * joined with `?presence=1` is sent first, counting itself.
   */
  presence?: string;
  /** That state's version: presence frames up to it are already counted in it. */
  presenceVersion?: number;
  /**
   * To a connection host on a Pusher presence channel (src/channel/pusher-audience.ts): the members'
   * set a joining connection is sent in `subscription_succeeded`, the version of the member frames it
   * already counts, and whether the channel needs every member's `user_info` again.
   */
  pusher?: { set: string; version: number; needInfo?: true };
}

/** The channel as its relays call it (its object implements these; the stub makes them async). */
export interface ChannelForRelay {
  relayReport(channel: string, report: RelayReport): RelayReportAnswer | Promise<RelayReportAnswer>;
  framesAfter(
    after: number,
    upTo: number,
    maxBytes: number,
  ): { frames: LiveFrame[]; more: boolean } | Promise<{ frames: LiveFrame[]; more: boolean }>;
}
