/**
 * `GET /v1/subscribe/{channel}`, WebSocket or SSE (docs/api.md, Subscribe and history; Bounds).
 *
 * Subscribe order: channel → mode → the token is verified (signature, expiry, type) → one budget is
 * charged: `subscribe:<sub>` for a verified token, else the client IP's read budget (no token, or one
 * that does not verify), so nobody can spend or read another subject's budget → private channels
 * need that verified token with scope and channel → the channel reserves a slot on a relay of the
 * subscriber's placement group (the client's lease on its connections over all channels first,
 * `MAX_CONNECTIONS_PER_CLIENT`: 429 `connections`; then the client's `MAX_SUBSCRIPTIONS_PER_CLIENT` reached: 429;
 * `MAX_SUBSCRIBERS` past: 503) → that relay takes the connection
 * (docs/api.md, "Relays"). Every refusal is a plain HTTP response before upgrade.
 */
import { Hono } from "hono";
import * as z from "zod";
import type { RelayAssignment } from "../../channel/calls";
import {
  admissionOf,
  anonymousFullError,
  clientCapError,
  clientKey,
  NET_SHARE,
  netCapError,
} from "../../channel/client-cap";
import { readBudget, subscribeBudget } from "../../limiter/budgets";
import { relayStub } from "../../platform/stubs";
import { RELAY_REFUSED_STATUS, subscribeRequest } from "../../relay/calls";
import { placementGroup } from "../../relay/placement";
import { parseMaxRate } from "../../relay/reader-rate";
import { ApiError, invalidArgument, unauthenticated, unavailable } from "../../wire/errors";
import { beyondHead, readSubscribeQuery, resumePoint, WS_PROTOCOL } from "../../wire/subscribe-params";
import type { AppEnv } from "../app-env";
import { checkGrant, grants, MISSING_BEARER, verifyAccess } from "../auth/authorise";
import { offeredProtocols, presentedToken } from "../auth/subscriber-access";
import type { VerifiedToken } from "../auth/tokens";
import { releaseConnection, takeConnection } from "../gate/connections";
import { orUnavailable } from "../http/errors";
import { ACCESS_TOKEN, ChannelPath, documented, ErrorBody, errors, json, route } from "../http/openapi";
import { channelParam, clientIp } from "../http/params";
import { countedChannelStub } from "../services";
import { audienceOf } from "../shards/audience";

/** `Retry-After` of a subscribe refused at `MAX_SUBSCRIBERS`: subscribers come and go by the second. */
export const FULL_RETRY_AFTER_S = 5;

export const subscribe = new Hono<AppEnv>();

const subscribeRoute = route({
  method: "get",
  path: "/{channel}",
  summary: "Subscribe over WebSocket or SSE",
  description:
    "WebSocket when the request upgrades (`Upgrade: websocket`), SSE with `Accept: text/event-stream`, otherwise 400. " +
    "Each message is one JSON text frame (a `Frame`; SSE: `id: <epoch>:<seq>`, `event: message`); with `?batch=1` every " +
    "WebSocket text frame is a JSON array of one or more `Frame`s in seq order, at most 1 MiB (what the relay has " +
    "pending for the socket, held at most `FRAME_DELAY`). `public:` channels need no " +
    "token. A WebSocket text frame `ping` is answered `pong`; any other frame closes the socket with 1008. A " +
    "subscriber more than 512 KiB behind is thinned: held to half the rate it takes, halved again while its backlog " +
    "grows, lifted a step at a time once it drains, told what it skipped in subscriber summaries (see `max_rate`); it " +
    "is closed with 4008 (SSE: the stream ends) only when still over 1 MiB at 1 message a second. A replay of over " +
    "1 MiB is cut short the same way, and the most-behind are closed when one relay holds 32 MiB for its subscribers " +
    "together; resume with `?after=`. A subscription opened with a " +
    'token ends at the token\'s `exp`: a last WebSocket frame `{"type":"expired","reason":"token expired",' +
    '"epoch":E,"seq":N}` (with `?batch=1` inside an array) then close 4001 `token expired`; SSE `id: E:N`, `event: expired` ' +
    "with that frame as data, then the end. N is the last seq the subscription was sent or is past (its resume " +
    "point when it was sent nothing): reconnect with a fresh token and `?after=` the larger of N and the last seq " +
    "received. SSE streams get a `: keepalive` comment line at least every 15 s. " +
    "A client (its token's `sub`, else its IP, IPv6 per /64) holds at most `MAX_SUBSCRIPTIONS_PER_CLIENT` open " +
    "subscriptions of one channel: one more answers 429 with bucket `subscriptions` and `Retry-After`; anonymous " +
    "clients of one IPv6 /48 together at most 10 times that (429, bucket `subscriptions`). A client holds at most " +
    "`MAX_CONNECTIONS_PER_CLIENT` open subscriptions and Pusher connections over all channels: one more answers 429 " +
    "with bucket `connections`. On a public channel anonymous subscribers hold at most `ANONYMOUS_SHARE` of " +
    "`MAX_SUBSCRIBERS`: one more anonymous subscribe answers 503 with `Retry-After`, while token holders still get in. " +
    "Every refusal is a plain HTTP response before any upgrade. " +
    // Summaries of drops (docs/api.md, "Summaries of drops").
    "On a channel with a `THROTTLE_SUMMARY` rule, every `SUMMARY_INTERVAL` with drops each subscriber also gets " +
    '`{"type":"summary","channel","from","to","dropped":N,"by_key":{"<value>":count,…,"(other)":count}}` (the 20 ' +
    "largest keys of the value at the rule's JSON Pointer, counts adding up to `dropped`, the channel's drops in " +
    "[from, to)): no seq, never in history or replayed; with `?batch=1` packed like a `Frame`; SSE `event: summary`, no `id`.",
  security: [{}, ...ACCESS_TOKEN],
  request: {
    params: ChannelPath,
    query: z.object({
      after: z
        .string()
        .optional()
        .openapi({
          description:
            "Replay retained messages with a higher seq first. With `epoch`: an epoch that is no longer the channel's " +
            "replays everything kept from seq 1; `after` beyond the head in the current epoch (or without `epoch`) " +
            "answers 400 before any upgrade: a numbering restart is never skipped silently.",
        }),
      epoch: z.string().optional().openapi({
        description:
          "1–64 characters of `[A-Za-z0-9_-]` (else 400, with or without `after`): the numbering `after` counts in (used only with `after`).",
      }),
      token: z.string().optional().openapi({ description: "The fallback way to send a token (lands in logs)." }),
      batch: z
        .enum(["0", "1"])
        .optional()
        .openapi({
          description:
            "`1`: packed frames, each a JSON array of `Frame`s (WebSocket; SSE still sends one event per message). " +
            "`0` or absent: one `Frame` per text frame. Any other value answers 400.",
        }),
      presence: z
        .enum(["0", "1"])
        .optional()
        .openapi({
          description:
            '`1`: presence frames too (`{"type":"presence","action":"state"|"join"|"leave"|"interval",…}`: first a ' +
            "`state`, then `join`/`leave` up to `PRESENCE_ANNOUNCE_MAX` subscribers or one `interval` per " +
            "`PRESENCE_INTERVAL` above; SSE `event: presence` with no `id`); never in history, never replayed. " +
            "Any other value answers 400.",
        }),
      max_rate: z
        .string()
        .optional()
        .openapi({
          example: "5/s",
          description:
            "At most this many messages per second for this subscriber: a rate shorthand worth 1/s to 1000/s " +
            "(`5/s`, `120/m` = 2/s; anything else, an empty value included, answers 400). A bucket of that rate, " +
            "burst one second's worth: priority messages always pass (taking budget when there is some); on a " +
            "`CONFLATE_KEYS` channel a message with a key is held as the latest of its key until budget allows; " +
            "the rest is skipped for this subscriber alone. Delivered messages keep their seq and order. At most " +
            'once per `SUMMARY_INTERVAL` a subscriber that skipped receives `{"type":"summary","scope":"subscriber",' +
            '"channel","from","to","skipped":N[,"by_key"]}` (SSE `event: summary`, no `id`): received + skipped = ' +
            "everything the channel delivered while it was subscribed. A resume (`after`) replays within the same budget, " +
            "and is cut short at 1 MiB like any replay.",
        }),
    }),
    headers: z.object({
      upgrade: z.string().optional().openapi({ example: "websocket" }),
      accept: z.string().optional().openapi({ example: "text/event-stream" }),
      "last-event-id": z
        .string()
        .optional()
        .openapi({ description: "SSE resume: `<epoch>:<seq>` as event ids are (or a bare seq); `?after` wins." }),
      "sec-websocket-protocol": z
        .string()
        .optional()
        .openapi({ description: '`floodgate, bearer.<token>`: must offer "floodgate" when it offers any.' }),
    }),
  },
  responses: {
    101: {
      description: "WebSocket upgrade; answers `Sec-WebSocket-Protocol: floodgate` when subprotocols were offered.",
    },
    200: {
      description: "An SSE stream of `Frame`s.",
      content: {
        "text/event-stream": {
          schema: z.string().openapi({
            description:
              "`id: <epoch>:<seq>`, `event: message`, `data: <Frame>`; `id: <epoch>:<seq>`, `event: expired`, " +
              '`data: {"type":"expired","reason":"token expired","epoch":<epoch>,"seq":<seq>}` (then the end) when the token ' +
              'expires (reason `"session revoked"` when its session is revoked; `"stream lifetime reached"` ' +
              "when an anonymous stream reaches 24 h: resume with `Last-Event-ID`); `event: summary`, `data: <summary of drops>` with no `id` (see above); `: keepalive` comment lines.",
          }),
        },
      },
    },
    ...errors(400, 401, 403, 429, 500),
    503: json(
      ErrorBody,
      "`unavailable` / `UNAVAILABLE`, its reason in `Floodgate-Refusal`: `max_subscribers` (with `Retry-After`), the " +
        "channel has `MAX_SUBSCRIBERS` subscribers; `anonymous_subscribers` (with `Retry-After`), for a subscribe without " +
        "a verified token to a public channel, anonymous subscribers hold `ANONYMOUS_SHARE` of them; `unavailable`, the " +
        "channel could not be reached.",
    ),
    429: json(
      ErrorBody,
      "`resource_exhausted` / `RATE_LIMITED` with `Retry-After`: bucket `subscribe` (the subject's budget) or " +
        "`read` (the client IP's, without a verified token), with `RateLimit` headers; or bucket `subscriptions`: " +
        "the client already holds `MAX_SUBSCRIPTIONS_PER_CLIENT` open subscriptions of this channel (or anonymous " +
        "clients of its IPv6 /48 hold 10 times that); or bucket `connections`: the client already holds " +
        "`MAX_CONNECTIONS_PER_CLIENT` open subscriptions and Pusher connections over all channels.",
    ),
  },
});

subscribe.get(documented(subscribe, subscribeRoute), async (c) => {
  const svc = c.get("svc");
  const channel = channelParam(c.req.param("channel"));
  const upgrade = (c.req.header("upgrade") ?? "").toLowerCase() === "websocket";
  const sse = (c.req.header("accept") ?? "").toLowerCase().includes("text/event-stream");
  if (!upgrade && !sse) {
    throw invalidArgument("subscribe needs a WebSocket upgrade or Accept: text/event-stream");
  }
  const {
    after,
    epoch,
    batch,
    presence,
    maxRate: maxRateText,
  } = readSubscribeQuery((name) => c.req.query(name), upgrade ? undefined : c.req.header("last-event-id"));
  // Each reader's rate (docs/api.md, "Each reader's rate"): 1/s to 1000/s, else 400 before anything else.
  const maxRate = maxRateText === null ? null : parseMaxRate(maxRateText);
  const protocols = upgrade ? offeredProtocols(c.req.raw) : [];
  if (protocols.length > 0 && !protocols.includes(WS_PROTOCOL)) {
    // The upgrade must answer with one offered subprotocol, and the only other one is the token.
    throw invalidArgument(`a WebSocket that offers subprotocols must offer "${WS_PROTOCOL}"`);
  }

  const token = presentedToken(c.req.raw, c.req.query("token"), protocols);
  let verified: VerifiedToken | null = null;
  let refused: ApiError | null = null;
  if (token) {
    try {
      verified = await verifyAccess(c.env, token);
    } catch (e) {
      if (!(e instanceof ApiError) || e.kind !== "unauthenticated") throw e;
      refused = e;
    }
  }
  const budget = verified
    ? subscribeBudget(svc.config, channel, verified.claims.sub)
    : readBudget(svc.config, clientIp(c.req.raw));
  const limitHeaders = await svc.gate.check(verified ? "subscribe" : "read", budget.key, budget.limit, c.var.defer);
  if (channel.visibility === "private") {
    if (!verified) throw refused ?? unauthenticated(MISSING_BEARER);
    checkGrant(verified, "subscribe", channel, svc.config.analyticsChannel.name);
  }

  // Counted per token subject, or per IP (/64) for a subscriber without a verified token. Presence
  // names a subject only where its token grants the channel (docs/api.md, "Presence"): a token for
  // other channels on a public one subscribes anonymously, counted but never named to anyone.
  const named = verified && grants(verified, "subscribe", channel, svc.config.analyticsChannel.name) ? verified : null;
  const client = clientKey(named ? named.claims.sub : null, clientIp(c.req.raw));
  // Its connections over all channels first (MAX_CONNECTIONS_PER_CLIENT): a lease its relay confirms.
  const lease = await takeConnection(c.env, client, svc.config.maxConnectionsPerClient);
  const release = () => c.var.defer(releaseConnection(c.env, client, lease));
  // A sharded channel's subscriber joins its own shard, a channel of its own (docs/api.md, "Shards").
  const { key } = audienceOf(svc.config, channel, verified?.claims, c.req.raw);
  const slot = await orUnavailable(
    "channel",
    async (): Promise<RelayAssignment> =>
      await countedChannelStub(c.env, key).assignRelay(
        key,
        placementGroup(c.req.raw),
        svc.config.relayCapacity,
        client,
        admissionOf(svc.config, channel.visibility),
        { announceMax: svc.config.presenceAnnounceMax, intervalMs: svc.config.presenceIntervalMs },
        after === null ? undefined : { after, epoch },
      ),
  ).catch((e) => {
    // A subscribe the channel could not answer takes nothing either (docs/api.md).
    release();
    throw e;
  });
  if (!("relay" in slot)) release();
  if ("beyond" in slot) throw beyondHead(after ?? 0, slot.head);
  if ("clientFull" in slot) throw clientCapError(svc.config.maxSubscriptionsPerClient);
  if ("netFull" in slot) throw netCapError(NET_SHARE * svc.config.maxSubscriptionsPerClient);
  if ("anonymousFull" in slot) throw anonymousFullError();
  if ("full" in slot) {
    throw unavailable(
      "max_subscribers",
      "channel has as many subscribers as it serves (MAX_SUBSCRIBERS); retry later",
      FULL_RETRY_AFTER_S,
    );
  }
  const relaySubscribe = subscribeRequest(
    {
      channel: key,
      relay: slot.relay,
      group: slot.group,
      k: slot.k,
      reservation: slot.reservation,
      client,
      lease,
      mode: upgrade ? "ws" : "sse",
      batch: upgrade && batch,
      presence,
      head: slot.head,
      // Resumes after `after` (from seq 1 when its epoch is gone: docs/api.md, "Numbering restarts");
      // a subscriber that does not resume gets what follows its slot.
      floor: Math.min(resumeFrom(after, epoch, slot), slot.head),
      epoch: slot.epoch,
      // A subscription opened with a token ends when the token does (the relay closes it at `exp`).
      expiresAt: verified ? verified.claims.exp * 1000 : null,
      // And when its session is revoked (the relay reads the list of revoked sessions).
      sid: verified?.claims.sid ?? null,
      maxRate,
    },
    c.req.raw,
  );
  const res = await orUnavailable("channel", () => relayStub(c.env, slot.relay).fetch(relaySubscribe)).catch((e) => {
    release();
    throw e;
  });
  if (res.status === RELAY_REFUSED_STATUS) {
    release();
    throw unavailable("unavailable", "channel is temporarily unavailable; retry");
  }
  // A new response, since the object's headers are immutable and the app adds security headers.
  const headers = new Headers(res.headers);
  for (const [k, v] of Object.entries(limitHeaders)) headers.set(k, v);
  if (res.webSocket && protocols.length > 0) headers.set("Sec-WebSocket-Protocol", WS_PROTOCOL);
  if (res.webSocket) return new Response(null, { status: 101, webSocket: res.webSocket, headers });
  return new Response(res.body, { status: res.status, headers });
});

/** Where a subscriber's stream starts: its resume point in the slot's numbering, else the head. */
function resumeFrom(after: number | null, epoch: string | null, slot: { head: number; epoch: string }): number {
  const point = resumePoint(after, epoch, slot);
  // "beyond" was refused by the channel before it gave the slot; the head is its safe reading.
  return point === null || point === "beyond" ? slot.head : point;
}
