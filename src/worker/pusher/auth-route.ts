/**
 * `POST /v1/pusher/auth` (docs/api.md, "The Pusher door"): for apps with no backend of their own, a
 * Floodgate access token is turned into the Pusher channel authorization pusher-js asks its
 * `channelAuthorization.endpoint` for. Gated first by the token-issue budget (client IP), as minting
 * is; then the token (401), its `subscribe` scope and a pattern granting `pusher:<channel_name>`
 * (403), then pusher-js's form body (`socket_id`, `channel_name`; JSON is taken too). Answers
 * `{"auth"}`, and on a presence channel `channel_data` with the token's `sub` as `user_id`.
 */
import { Hono } from "hono";
import * as z from "zod";
import { tokenIssueBudget } from "../../limiter/budgets";
import { parseChannelName } from "../../wire/channel-names";
import { ApiError, invalidArgument, unauthenticated } from "../../wire/errors";
import { checkPusherName, isPresence, pusherChannel } from "../../wire/pusher/names";
import { channelAuth } from "../../wire/pusher/signatures";
import type { AppEnv } from "../app-env";
import { authorise, bearer, MISSING_BEARER } from "../auth/authorise";
import { readBody } from "../http/body";
import { ACCESS_TOKEN, documented, ErrorBody, errors, json, route } from "../http/openapi";
import { clientIp } from "../http/params";

export const pusherAuth = new Hono<AppEnv>();

/** Most bytes of the form: a socket id and a channel name, with room to spare. */
const AUTH_BODY_MAX = 4096;

const AuthForm = z.object({
  socket_id: z.string().openapi({ example: "123.456" }),
  channel_name: z.string().openapi({ example: "presence-room.1" }),
});

const authRoute = route({
  method: "post",
  path: "/auth",
  summary: "A Pusher channel authorization for a Floodgate access token",
  description:
    'pusher-js\'s `channelAuthorization.endpoint` for apps with no backend (docs/api.md, "The Pusher door"): the token must ' +
    "grant `pusher:<channel_name>` with scope `subscribe`. Gated first by the token-issue budget (client IP), as minting. With the Pusher door closed it answers 404, as a route that does not exist.",
  security: ACCESS_TOKEN,
  request: {
    body: {
      content: { "application/x-www-form-urlencoded": { schema: AuthForm }, "application/json": { schema: AuthForm } },
      required: true,
    },
  },
  responses: {
    200: json(
      z.object({
        auth: z.string().openapi({ description: "`<key>:<signature>` for `pusher:subscribe`." }),
        channel_data: z.string().optional().openapi({ description: 'Presence: `{"user_id":<the token\'s sub>}`.' }),
      }),
      "The authorization.",
    ),
    ...errors(400, 401, 403, 413, 429, 500),
    404: json(
      ErrorBody,
      "`bad_route` / `NOT_FOUND`: the Pusher door is closed (`PUSHER_APP_ID`, `PUSHER_APP_KEY`, `PUSHER_APP_SECRET` unset).",
    ),
  },
});

pusherAuth.post(documented(pusherAuth, authRoute), async (c) => {
  const svc = c.get("svc");
  const budget = tokenIssueBudget(svc.config, clientIp(c.req.raw));
  const headers = await svc.gate.check("token-issue", budget.key, budget.limit, c.var.defer);
  const app = svc.config.pusher.app;
  if (!app)
    throw new ApiError("not_found", "the Pusher door is closed (PUSHER_APP_ID, PUSHER_APP_KEY, PUSHER_APP_SECRET)");
  const token = bearer(c.req.raw);
  if (!token) throw unauthenticated(MISSING_BEARER);
  const { socketId, channelName } = await readForm(c.req.raw);
  const problem = checkPusherName(channelName);
  if (problem) throw invalidArgument(`channel_name: ${problem}`);
  if (!/^\d+\.\d+$/.test(socketId)) throw invalidArgument('socket_id must be a socket id such as "123.456"');
  // A public channel needs no authorization (pusher-js never asks), but a signature for it does no
  // harm: granted like any other, so an app that asks anyway gets what its token allows.
  const verified = await authorise(c.env, token, "subscribe", parseChannelName(pusherChannel(channelName)));
  const channelData = isPresence(channelName) ? JSON.stringify({ user_id: verified.claims.sub }) : null;
  const auth = await channelAuth(app, socketId, channelName, channelData);
  return c.json(channelData === null ? { auth } : { auth, channel_data: channelData }, 200, headers);
});

/** pusher-js's form body (or JSON). @throws ApiError 400, 413 */
async function readForm(request: Request): Promise<{ socketId: string; channelName: string }> {
  const text = new TextDecoder().decode(await readBody(request, AUTH_BODY_MAX));
  let fields: Record<string, unknown>;
  if ((request.headers.get("content-type") ?? "").includes("application/json")) {
    try {
      fields = JSON.parse(text) as Record<string, unknown>;
    } catch {
      throw invalidArgument("body is not valid JSON");
    }
  } else {
    fields = Object.fromEntries(new URLSearchParams(text));
  }
  const socketId = fields?.socket_id;
  const channelName = fields?.channel_name;
  if (typeof socketId !== "string" || typeof channelName !== "string") {
    throw invalidArgument("socket_id and channel_name are required");
  }
  return { socketId, channelName };
}
