/**
 * `GET /v1/presence/{channel}` (docs/api.md, "Presence"): how many are subscribed to a channel now,
 * and while it is small (occupancy ≤ `PRESENCE_ANNOUNCE_MAX`) who. The same door as history
 * ({@link readAccess}: the client IP's read budget, then a private channel's token).
 */
import { Hono } from "hono";
import * as z from "zod";
import type { AppEnv } from "../app-env";
import { readAccess } from "../auth/subscriber-access";
import { orUnavailable } from "../http/errors";
import { ACCESS_TOKEN, ChannelPath, documented, errors, json, route } from "../http/openapi";
import { channelParam } from "../http/params";

export const PresenceAnswerSchema = z
  .object({
    channel: z.string(),
    shard: z.string().optional().openapi({ description: "On a sharded channel: the caller's shard." }),
    occupancy: z
      .number()
      .int()
      .openapi({ description: "Open subscriptions (WebSocket and SSE) on every relay of the channel." }),
    mode: z.enum(["announce", "interval"]).openapi({
      description: "`announce` while occupancy ≤ `PRESENCE_ANNOUNCE_MAX`, else `interval`.",
    }),
    subjects: z
      .array(z.string())
      .optional()
      .openapi({
        description:
          "Announce mode only: the sorted, distinct token `sub`s of the subscribers whose token grants the channel " +
          "(anonymous ones, and those whose token is for other channels, counted, never listed).",
      }),
  })
  .openapi("Presence");

export const presence = new Hono<AppEnv>();

const presenceRoute = route({
  method: "get",
  path: "/{channel}",
  summary: "How many are subscribed to a channel, and in a small one who",
  description:
    "The same access rules and read budget as history: parameters first (400), then the client IP's read budget " +
    "(429), then a private channel's token with `subscribe` scope. In `interval` mode the answer is at most " +
    "`PRESENCE_INTERVAL` old; in `announce` mode a join or leave shows within 2 s. At most " +
    "`PRESENCE_ANNOUNCE_MAX` subjects.",
  security: [{}, ...ACCESS_TOKEN],
  request: { params: ChannelPath, query: z.object({ token: z.string().optional() }) },
  responses: {
    200: json(PresenceAnswerSchema, "Occupancy, mode, and in announce mode the subjects."),
    ...errors(400, 401, 403, 429, 500, 503),
  },
});

presence.get(documented(presence, presenceRoute), async (c) => {
  const channel = channelParam(c.req.param("channel"));
  // The object that answers: the channel's, or on a sharded channel the caller's shard's.
  const { limitHeaders, key } = await readAccess(c, channel);
  const answer = await orUnavailable("channel", () => c.var.svc.reads.presence(key));
  return c.json(answer, 200, limitHeaders);
});
