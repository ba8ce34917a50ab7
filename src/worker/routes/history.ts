/**
 * `GET /v1/history/{channel}` (docs/api.md, Subscribe and history; Bounds): a channel's retained
 * messages, oldest first, through the read door (src/worker/auth/subscriber-access.ts): the client
 * IP's read budget, then a private channel's token. On the analytics channel history pages through
 * every retained copy and filters by `source_channel`.
 */
import { Hono } from "hono";
import * as z from "zod";
import { invalidArgument } from "../../wire/errors";
import { beyondHead, epochParam, wholeParam } from "../../wire/subscribe-params";
import type { AppEnv } from "../app-env";
import { readAccess } from "../auth/subscriber-access";
import { orUnavailable } from "../http/errors";
import { ACCESS_TOKEN, ChannelPath, documented, errors, Frame, json, route } from "../http/openapi";
import { channelParam, sourceChannelParam } from "../http/params";

export const history = new Hono<AppEnv>();

const historyRoute = route({
  method: "get",
  path: "/{channel}",
  summary: "Read a channel's retained messages",
  description:
    "Oldest first, each frame with the channel's `epoch`. With `after`: the first `limit` messages with a higher " +
    "seq (see `epoch`); without: the newest `limit`. A page " +
    "also stops after 4 MiB. At most 1 s old. Parameters are checked first (400), then the client IP's read budget " +
    "(429), then the token.",
  security: [{}, ...ACCESS_TOKEN],
  request: {
    params: ChannelPath,
    query: z.object({
      after: z
        .string()
        .optional()
        .openapi({
          description:
            "Messages with a higher seq. With `epoch` (the `epoch` of the last message the reader has): an epoch " +
            "that is no longer the channel's reads from seq 1; `after` beyond the head in the current epoch (or " +
            "without `epoch`) answers 400 — a numbering restart is never skipped silently.",
        }),
      epoch: z.string().optional().openapi({
        description:
          "1–64 characters of `[A-Za-z0-9_-]` (else 400, with or without `after`): the numbering `after` counts in (used only with `after`).",
      }),
      limit: z.string().optional().openapi({ description: "1–1000, default 100." }),
      source_channel: z
        .string()
        .optional()
        .openapi({ description: "On the analytics channel only: copies from this channel." }),
      token: z.string().optional(),
    }),
  },
  responses: {
    200: json(z.object({ messages: z.array(Frame) }).openapi("HistoryPage"), "A page of frames."),
    ...errors(400, 401, 403, 429, 500, 503),
  },
});

history.get(documented(history, historyRoute), async (c) => {
  const svc = c.get("svc");
  const channel = channelParam(c.req.param("channel"));
  const after = wholeParam(c.req.query("after"), "after");
  // The numbering `after` counts in (docs/api.md, "Numbering restarts"): used only with `after`, but
  // checked either way, as a subscribe checks it, so one bad `epoch` is one 400 on both routes.
  const epochGiven = epochParam(c.req.query("epoch"));
  const epoch = after === null ? null : epochGiven;
  const limit = wholeParam(c.req.query("limit"), "limit", 1000) ?? 100;
  if (limit < 1) throw invalidArgument("limit must be between 1 and 1000");
  const source = sourceChannelParam(c.req.query("source_channel"), channel, svc.config);
  const { limitHeaders, key } = await readAccess(c, channel);
  // Shared for up to a second between readers of the same object (src/worker/reads/channel-reads.ts).
  const page = await orUnavailable("channel", () => svc.reads.history(key, after, limit, source?.name ?? null, epoch));
  if ("beyond" in page) throw beyondHead(after ?? 0, page.beyond);
  const body = `{"messages":[${page.frames.join(",")}]}`;
  return c.body(body, 200, { ...limitHeaders, "content-type": "application/json" });
});
