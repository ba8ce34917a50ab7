/**
 * The Pusher HTTP API (docs/api.md, "The Pusher door"), mounted at `/apps`: events, batch events,
 * occupied channels, one channel, a presence channel's users. Every request is signed as the Pusher
 * server libraries sign (./signed-request.ts); refusals are short text, as Pusher's servers answer.
 */
import { Hono } from "hono";
import * as z from "zod";
import { activeChannelsStub } from "../../platform/stubs";
import { parseChannelName } from "../../wire/channel-names";
import { checkPusherName, isPresence, pusherChannel, pusherName } from "../../wire/pusher/names";
import type { AppEnv } from "../app-env";
import { orUnavailable } from "../http/errors";
import { documented, EpochSchema, route } from "../http/openapi";
import { pusherChannelCounts } from "./channel-counts";
import { BATCH_MAX, publishEvents, readApiEvent } from "./events-api";
import { PusherHttpError, parseBody, pusherAnswer, signedRequest } from "./signed-request";

export const pusherApi = new Hono<AppEnv>();

/** Most channels or users one answer lists. */
export const LIST_MAX = 1000;

const AppPath = z.object({
  id: z.string().openapi({ param: { name: "id", in: "path" }, description: "PUSHER_APP_ID." }),
});
const ChannelName = z.string().openapi({ param: { name: "name", in: "path" }, description: "A Pusher channel name." });
const Signed = z.object({
  auth_key: z.string().openapi({ description: "PUSHER_APP_KEY." }),
  auth_timestamp: z.string().openapi({ description: "Epoch seconds, within 600 s of the server's clock." }),
  auth_version: z.literal("1.0"),
  body_md5: z.string().optional().openapi({ description: "Hex MD5 of the body (POST)." }),
  auth_signature: z.string().openapi({
    description:
      'Hex HMAC-SHA256 with the app secret of "<METHOD>\\n<path>\\n<the other query parameters sorted by lowercase key, k=v joined by &>".',
  }),
});
const Fate = z
  .union([
    z.object({ status: z.literal("delivered"), epoch: EpochSchema, seq: z.number().int() }),
    z.object({ status: z.literal("dropped") }),
    z.object({
      status: z.literal("unavailable"),
      reason: z.enum(["unavailable", "publish_overflow"]).openapi({
        description: "Why it was not taken, as a 503's `Floodgate-Refusal` would name it.",
      }),
    }),
  ])
  .openapi("PusherFate", {
    description:
      "What became of one channel's copy of an event. `unavailable`: not published (its channel could not be reached, or the server's waiting publishes were at their cap) while another copy of the request was; send this channel's copy again.",
  });
const text = (description: string) => ({ description, content: { "text/plain": { schema: z.string() } } });
const REFUSALS = {
  400: text("A bad body or parameter (a reserved event name among them)."),
  401: text("A bad or stale signature, or another app's key."),
  403: text(
    "A channel of the request is ANALYTICS_CHANNEL (a Pusher-named one): only Floodgate writes it. Nothing was published.",
  ),
  404: text("Unknown app id (or the Pusher door is closed)."),
  413: text(
    'An event whose data is over MAX_MESSAGE_BYTES (UTF-8 bytes, as sent) or whose stored body {"event","data"} is over 2 × MAX_MESSAGE_BYTES + 622 bytes (text mostly of control characters, which JSON escapes to 6 bytes each), or a body over 10 × MAX_MESSAGE_BYTES.',
  ),
  429: text(
    "The publish budget of the app key holds fewer tokens than the request has copies: nothing taken, nothing published (`Retry-After`).",
  ),
  500: text("A backend failed (the rate limiter among them); the text names no backend."),
  503: text(
    "A channel (or the list of occupied channels) could not be reached, or the server's waiting publishes are at their byte cap — for an event or batch, for every copy of the request: nothing was published; retry. `Floodgate-Refusal` names which (`unavailable`, `publish_overflow` with `Retry-After`). When some copies were published and others not, the answer is 200 and their fates say `unavailable`.",
  ),
};
const json = <S extends z.ZodType>(schema: S, description: string) => ({
  description,
  content: { "application/json": { schema } },
});
const EventBody = z.object({
  name: z.string().openapi({
    description:
      "The event name, 1–200 characters; names beginning `pusher:`, `pusher_internal:` or `floodgate:` are the server's own (400).",
  }),
  data: z.string().openapi({
    description: "The event's data, delivered exactly as sent: at most MAX_MESSAGE_BYTES (UTF-8 bytes).",
  }),
  channels: z.array(z.string()).max(100).optional(),
  channel: z.string().optional(),
  socket_id: z.string().optional().openapi({ description: "This connection is not sent the event." }),
  info: z.string().optional().openapi({
    description:
      "`subscription_count`, `user_count` (comma-separated): each channel's, over every shard of a sharded one.",
  }),
  priority: z.enum(["high", "normal"]).optional().openapi({
    description: "`high`: never dropped by the before-publish throttle (the app secret is the scope).",
  }),
});

const eventsRoute = route({
  method: "post",
  path: "/{id}/events",
  summary: "Trigger an event on up to 100 Pusher channels",
  description:
    "Each channel's copy is a publish: charged to the publish budget (the app key as subject; every copy, all or none), throttled, delivered. " +
    'Answers `{}` (with `info`, `{"channels":{N:{…}}}`) and `floodgate`: each copy\'s fate.',
  request: { params: AppPath, query: Signed, body: { ...json(EventBody, "The event."), required: true } },
  responses: {
    200: json(
      z.object({
        channels: z.record(z.string(), z.record(z.string(), z.number().int())).optional(),
        floodgate: z.record(z.string(), Fate),
      }),
      "Published.",
    ),
    ...REFUSALS,
  },
});

pusherApi.post(documented(pusherApi, eventsRoute), (c) =>
  pusherAnswer(c, async () => {
    const { app, body } = await signedRequest(c);
    const event = readApiEvent(parseBody(body), c.get("svc").config.maxMessageBytes, false);
    const { fates, info } = await publishEvents(c, app.key, [event]);
    return c.json({ ...(info[0] ? { channels: info[0] } : {}), floodgate: fates[0] ?? {} });
  }),
);

const batchRoute = route({
  method: "post",
  path: "/{id}/batch_events",
  summary: "Trigger up to 10 events, one channel each",
  description:
    'Each event as `POST /apps/{id}/events` with one `channel`; the batch is charged as one request (every event, all or none). Answers `{}` (with `info`, `{"batch":[…]}`) and ' +
    "`floodgate`: one fate map per event, in order.",
  request: {
    params: AppPath,
    query: Signed,
    body: { ...json(z.object({ batch: z.array(EventBody).max(BATCH_MAX) }), "The events."), required: true },
  },
  responses: {
    200: json(
      z.object({
        batch: z.array(z.record(z.string(), z.number().int())).optional(),
        floodgate: z.array(z.record(z.string(), Fate)),
      }),
      "Published.",
    ),
    ...REFUSALS,
  },
});

pusherApi.post(documented(pusherApi, batchRoute), (c) =>
  pusherAnswer(c, async () => {
    const { app, body } = await signedRequest(c);
    const value = parseBody(body) as { batch?: unknown };
    const batch = value !== null && typeof value === "object" ? value.batch : undefined;
    if (!Array.isArray(batch) || batch.length === 0 || batch.length > BATCH_MAX) {
      throw new PusherHttpError(400, `"batch" must list 1 to ${BATCH_MAX} events`);
    }
    const max = c.get("svc").config.maxMessageBytes;
    const events = batch.map((e) => readApiEvent(e, max, true));
    const { fates, info } = await publishEvents(c, app.key, events);
    const anyInfo = info.some((i) => i !== null);
    return c.json({
      ...(anyInfo ? { batch: info.map((i) => Object.values(i ?? {})[0] ?? {}) } : {}),
      floodgate: fates,
    });
  }),
);

const channelsRoute = route({
  method: "get",
  path: "/{id}/channels",
  summary: "Occupied Pusher channels",
  description:
    "Channels with at least one subscriber through either door, by name, at most 1,000 (the rest not listed). " +
    "A sharded channel is listed once; its `user_count` adds up its shards' members.",
  request: {
    params: AppPath,
    query: Signed.extend({
      filter_by_prefix: z.string().optional(),
      info: z.string().optional().openapi({ description: "`user_count` (with a `presence-` prefix)." }),
    }),
  },
  responses: {
    200: json(
      z.object({ channels: z.record(z.string(), z.object({ user_count: z.number().int().optional() })) }),
      "The channels.",
    ),
    ...REFUSALS,
  },
});

pusherApi.get(documented(pusherApi, channelsRoute), (c) =>
  pusherAnswer(c, async () => {
    const { params } = await signedRequest(c);
    const prefix = params.get("filter_by_prefix") ?? "";
    const info = (params.get("info") ?? "").split(",").filter(Boolean);
    for (const a of info) if (a !== "user_count") throw new PusherHttpError(400, `info may name user_count, not ${a}`);
    if (info.length > 0 && !prefix.startsWith("presence-")) {
      throw new PusherHttpError(400, "info=user_count needs filter_by_prefix=presence-");
    }
    const rows = await orUnavailable("channel registry", () =>
      activeChannelsStub(c.env).pusherChannels(pusherChannel(prefix), LIST_MAX),
    );
    const channels: Record<string, { user_count?: number }> = {};
    for (const r of rows) {
      const name = pusherName(r.channel);
      if (name !== null) channels[name] = info.length > 0 ? { user_count: r.users } : {};
    }
    return c.json({ channels });
  }),
);

/** The channel of a `{name}` path parameter, or 400. */
function channelOf(name: string) {
  const problem = checkPusherName(name);
  if (problem) throw new PusherHttpError(400, problem);
  return parseChannelName(pusherChannel(name));
}

const channelRoute = route({
  method: "get",
  path: "/{id}/channels/{name}",
  summary: "One Pusher channel",
  request: {
    params: AppPath.extend({ name: ChannelName }),
    query: Signed.extend({
      info: z.string().optional().openapi({ description: "`subscription_count`, `user_count` (presence)." }),
    }),
  },
  responses: {
    200: json(
      z.object({
        occupied: z.boolean(),
        subscription_count: z.number().int().optional(),
        user_count: z.number().int().optional(),
      }),
      "Counts through either door, the whole channel's (every shard of a sharded one); `user_count`: presence members, a user in two shards once.",
    ),
    ...REFUSALS,
  },
});

pusherApi.get(documented(pusherApi, channelRoute), (c) =>
  pusherAnswer(c, async () => {
    const { params } = await signedRequest(c);
    const name = c.req.param("name");
    const channel = channelOf(name);
    const info = (params.get("info") ?? "").split(",").filter(Boolean);
    for (const a of info) {
      if (a !== "subscription_count" && a !== "user_count") throw new PusherHttpError(400, `unknown info ${a}`);
      if (a === "user_count" && !isPresence(name))
        throw new PusherHttpError(400, "user_count is for presence channels");
    }
    // The whole channel's counts, every shard's (./channel-counts.ts), not the caller's shard's.
    const counts = await pusherChannelCounts(c.env, c.get("svc").config, channel, {
      members: info.includes("user_count"),
      users: 0,
    });
    return c.json({
      occupied: counts.subscriptions > 0,
      ...(info.includes("subscription_count") ? { subscription_count: counts.subscriptions } : {}),
      ...(info.includes("user_count") ? { user_count: counts.members } : {}),
    });
  }),
);

const usersRoute = route({
  method: "get",
  path: "/{id}/channels/{name}/users",
  summary: "A presence channel's members",
  description: "Distinct `user_id`s over every shard of a sharded channel, at most 1,000.",
  request: { params: AppPath.extend({ name: ChannelName }), query: Signed },
  responses: { 200: json(z.object({ users: z.array(z.object({ id: z.string() })) }), "The members."), ...REFUSALS },
});

pusherApi.get(documented(pusherApi, usersRoute), (c) =>
  pusherAnswer(c, async () => {
    await signedRequest(c);
    const name = c.req.param("name");
    const channel = channelOf(name);
    if (!isPresence(name)) throw new PusherHttpError(400, "users are listed for presence channels only");
    const { ids } = await pusherChannelCounts(c.env, c.get("svc").config, channel, { members: true, users: LIST_MAX });
    return c.json({ users: ids.map((id) => ({ id })) });
  }),
);
