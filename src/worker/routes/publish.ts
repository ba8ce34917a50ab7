/**
 * `POST /v1/publish/{channel}` (docs/api.md): validate everything first (channel, token, idempotency
 * key, body), then charge the publish budget, then run the before-publish throttle, then deliver.
 */
import { Hono } from "hono";
import * as z from "zod";
import { messageKey } from "../../../functions/drop-summary";
import { publishBudget } from "../../limiter/budgets";
import { isAnalytics, summaryFor } from "../../settings/rules";
import type { SummaryRule } from "../../settings/settings";
import { invalidArgument, permissionDenied } from "../../wire/errors";
import { readPusherBody } from "../../wire/pusher/event-meta";
import type { AppEnv } from "../app-env";
import { authorise, bearer } from "../auth/authorise";
import type { VerifiedToken } from "../auth/tokens";
import { deniedResponse } from "../gate/denied-response";
import { parseJsonText, readBody } from "../http/body";
import { orUnavailable } from "../http/errors";
import { ACCESS_TOKEN, ChannelPath, documented, EpochSchema, errors, json, route } from "../http/openapi";
import { channelParam } from "../http/params";
import { securedJson } from "../http/security-headers";
import { throttleAndDeliver } from "../publish-one";
import { pusherSummaryKey } from "../pusher/summary-key";
import { broadcastToShards } from "../shards/broadcast";
import { publishAudience } from "../shards/shard-header";

const IDEMPOTENCY_KEY = /^[\x21-\x7e]{1,64}$/;

/** Validates `Idempotency-Key`: 1–64 visible ASCII characters. @throws ApiError 400 */
export function idempotencyKey(value: string | undefined): string | undefined {
  if (value === undefined) return undefined;
  if (!IDEMPOTENCY_KEY.test(value)) {
    throw invalidArgument("Idempotency-Key must be 1 to 64 visible ASCII characters");
  }
  return value;
}

/**
 * `Floodgate-Priority` (docs/api.md, "Priority messages"): `high` from a token with the `priority`
 * scope passes the throttle; `normal` or no header is an ordinary publish.
 * @throws ApiError 400 for any other value, 403 for `high` without the scope
 */
export function priorityHeader(value: string | undefined, token: VerifiedToken): boolean {
  if (value === undefined || value === "normal") return false;
  if (value !== "high") throw invalidArgument('Floodgate-Priority must be "high" or "normal"');
  if (!token.claims.scp.includes("priority")) {
    throw permissionDenied('Floodgate-Priority: high needs a token with the "priority" scope');
  }
  return true;
}

/**
 * Reads the body bounded by `maxBytes` and parses it only to validate it: from here on the message is
 * its text (a copy never keeps both). On a channel with a summary rule, also the key its drop would
 * count under, taken now so the parsed value is not kept while the publish waits.
 * @throws ApiError 413, 400
 */
async function readMessage(
  request: Request,
  maxBytes: number,
  summary: SummaryRule | null,
  pusher: boolean,
): Promise<[text: string, dropKey: string | undefined]> {
  const { value, text } = parseJsonText(await readBody(request, maxBytes));
  if (!pusher) return [text, summary ? messageKey(value, summary.tokens) : undefined];
  // A Pusher channel's messages are Pusher events (docs/api.md, "The Pusher door"): {"event","data"}.
  const event = readPusherBody(value);
  if ("problem" in event) throw invalidArgument(event.problem);
  return [text, summary ? pusherSummaryKey(event.event, event.data, summary.tokens) : undefined];
}

export const publish = new Hono<AppEnv>();

const Delivered = z
  .object({
    status: z.literal("delivered"),
    channel: z.string(),
    epoch: EpochSchema,
    seq: z.number().int(),
    id: z.string(),
    shard: z.string().optional().openapi({ description: "Sharded channels only: the shard delivered into." }),
    published_at: z.number().int().openapi({ description: "Epoch milliseconds." }),
  })
  .openapi("Delivered");

const Broadcast = z
  .object({
    status: z.literal("delivered"),
    channel: z.string(),
    shards: z.array(z.string()).openapi({ description: "The shards the message was delivered into, by name." }),
    published_at: z.number().int().openapi({
      description:
        "Epoch milliseconds: when the first shard took it (a repeat of its Idempotency-Key answers the same).",
    }),
  })
  .openapi("Broadcast");

const Dropped = z.object({ status: z.literal("dropped") }).openapi("Dropped");

const publishRoute = route({
  method: "post",
  path: "/{channel}",
  summary: "Publish a message",
  description:
    "Checked in order: channel (400; 403 for the analytics channel, which only Floodgate writes), token (401/403), Idempotency-Key (400), " +
    'Floodgate-Priority (400; 403 for high without the priority scope), body (413, 400; on a `pusher:` channel it must be `{"event","data"}` with `data` a string and `event` not beginning `pusher:`, `pusher_internal:` or `floodgate:`); nothing is ' +
    "charged before these pass. Then the publish budget (429), the before-publish throttle (202, do not " +
    "retry it; a priority message never meets it) and delivery (200). A repeat of an Idempotency-Key within 10 minutes answers the first result again.",
  security: ACCESS_TOKEN,
  request: {
    params: ChannelPath,
    headers: z.object({
      "idempotency-key": z.string().optional().openapi({ description: "1–64 visible ASCII characters." }),
      "floodgate-priority": z.enum(["high", "normal"]).optional().openapi({
        description:
          "`high` (a token with the `priority` scope): never dropped by the throttle, still charged to the publish budget. `normal` or absent: an ordinary publish.",
      }),
      "floodgate-shard": z
        .string()
        .optional()
        .openapi({
          description:
            "Sharded channels, `broadcast` scope only (else 403): `*` delivers into every shard with subscribers or " +
            "history, never throttled; a shard's name publishes into that shard. A bad name, or an unsharded channel: 400.",
        }),
    }),
    // Documentation only: the body is read bounded by MAX_MESSAGE_BYTES and kept as sent (below).
    body: {
      ...json(z.unknown().openapi({ description: "Any JSON value.", example: { emoji: "🔥" } }), "The message."),
      required: true,
    },
  },
  responses: {
    200: json(
      z.union([Delivered, Broadcast]),
      "Delivered to every current subscriber (a `Broadcast` answer for `Floodgate-Shard: *`).",
    ),
    202: json(Dropped, "Dropped by the before-publish throttle and copied to the analytics channel. Not an error."),
    ...errors(400, 401, 403, 413, 429, 500, 503),
  },
});

publish.post(documented(publish, publishRoute), async (c) => {
  const svc = c.get("svc");
  const { config } = svc;
  const channel = channelParam(c.req.param("channel"));
  // The record of dropped messages holds only what Floodgate copied there: no token may add to it.
  if (isAnalytics(config, channel)) {
    throw permissionDenied("the analytics channel is written by Floodgate only: its messages are copies of drops");
  }
  const token = await authorise(c.env, bearer(c.req.raw), "publish", channel);
  const idemKey = idempotencyKey(c.req.header("idempotency-key"));
  const priority = priorityHeader(c.req.header("floodgate-priority"), token);
  // The shard this publish goes to (docs/api.md, "Shards"): the publisher's own, or the header's.
  const target = publishAudience(config, channel, token, c.req.raw);
  const [messageJson, dropKey] = await readMessage(
    c.req.raw,
    config.maxMessageBytes,
    summaryFor(config, channel),
    channel.prefix === "pusher",
  );
  const sub = token.claims.sub;

  const budget = publishBudget(config, channel, sub, token.claims.rl);
  // A denial is answered here rather than thrown: a flood's every request ends on this line.
  const charged = await svc.gate.charge("publish", budget.key, budget.limit, c.var.defer);
  if (charged.denial) return deniedResponse(charged.denial);

  if ("broadcast" in target) {
    const now = Date.now();
    const cmd = { data: messageJson, publisher: sub, now, ...(idemKey ? { idempotencyKey: idemKey } : {}) };
    const delivered = await orUnavailable(
      "channel",
      () => broadcastToShards(c.env, svc.metrics, channel.name, cmd),
      "retry with the same Idempotency-Key",
    );
    const shards = delivered.map((d) => d.shard);
    // A repeat answers the first result: the time the first shard took it (every shard, when it was whole).
    const published_at = delivered.reduce((first, d) => Math.min(first, d.published_at), now);
    return c.json({ status: "delivered", channel: channel.name, shards, published_at }, 200, charged.headers);
  }
  const { key, shard } = target.audience;
  const outcome = await throttleAndDeliver(
    svc,
    {
      channel,
      key,
      shard,
      messageJson,
      publisher: sub,
      priority,
      ...(dropKey !== undefined ? { dropKey } : {}),
      ...(idemKey ? { idempotencyKey: idemKey } : {}),
    },
    c.var.defer,
  );
  // Built with the security headers in one copy (src/worker/http/security-headers.ts): a drop flood's
  // every request ends here, like a denial's.
  if (outcome.status === "dropped") return securedJson({ status: "dropped" }, 202, charged.headers);
  const { replayed: _, ...body } = outcome;
  // With the security headers in one copy, as a drop's 202 (a delivered publish is the common answer).
  return securedJson(body, 200, charged.headers);
});
