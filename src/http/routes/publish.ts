/**
 * `POST /v1/publish/{channel}` (docs/api.md): validate everything first (channel, token, idempotency
 * key, body), then charge the publish budget, then run the before-publish throttle, then deliver.
 */
import { Hono } from "hono";
import * as z from "zod";
import { beforePublish } from "../../../functions/before-publish";
import type { QueuedCopy } from "../../../functions/drop-copies";
import { authorise, bearer } from "../../auth/authorise";
import type { PublishOutcome } from "../../channel/types";
import { broadcastToShards } from "../../delivery/shard-broadcast";
import { thinningFor } from "../../platform/config";
import { publishBudget } from "../../rate-limit/budgets";
import type { AppEnv } from "../app-env";
import { parseJsonText, readBody } from "../body";
import { invalidArgument, orUnavailable, permissionDenied } from "../errors";
import { ACCESS_TOKEN, ChannelPath, documented, errors, json, route } from "../openapi";
import { channelParam } from "../params";
import { publishAudience } from "../shard-header";

const IDEMPOTENCY_KEY = /^[\x21-\x7e]{1,64}$/;

/** Validates `Idempotency-Key`: 1–64 visible ASCII characters. @throws ApiError 400 */
export function idempotencyKey(value: string | undefined): string | undefined {
  if (value === undefined) return undefined;
  if (!IDEMPOTENCY_KEY.test(value)) {
    throw invalidArgument("Idempotency-Key must be 1 to 64 visible ASCII characters");
  }
  return value;
}

export const publish = new Hono<AppEnv>();

const Delivered = z
  .object({
    status: z.literal("delivered"),
    channel: z.string(),
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
    published_at: z.number().int(),
  })
  .openapi("Broadcast");

const Dropped = z.object({ status: z.literal("dropped") }).openapi("Dropped");

const publishRoute = route({
  method: "post",
  path: "/{channel}",
  summary: "Publish a message",
  description:
    "Checked in order: channel (400; 403 for the analytics channel, which only Floodgate writes), token (401/403), Idempotency-Key (400), body (413, 400); nothing is " +
    "charged before these pass. Then the publish budget (429), the before-publish throttle (202, do not " +
    "retry it) and delivery (200). A repeat of an Idempotency-Key within 10 minutes answers the first result again.",
  security: ACCESS_TOKEN,
  request: {
    params: ChannelPath,
    headers: z.object({
      "idempotency-key": z.string().optional().openapi({ description: "1–64 visible ASCII characters." }),
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
  if (channel.name === config.analyticsChannel.name) {
    throw permissionDenied("the analytics channel is written by Floodgate only: its messages are copies of drops");
  }
  const token = await authorise(c.env, bearer(c.req.raw), "publish", channel);
  const idemKey = idempotencyKey(c.req.header("idempotency-key"));
  // The shard this publish goes to (docs/api.md, "Shards"): the publisher's own, or the header's.
  const target = publishAudience(config, channel, token, c.req.raw);
  // Parsed only to validate it: from here on the message is its text (a copy never keeps both).
  const messageJson = parseJsonText(await readBody(c.req.raw, config.maxMessageBytes)).text;
  const sub = token.claims.sub;

  const budget = publishBudget(config, channel, sub, token.claims.rl);
  const limitHeaders = await svc.gate.check("publish", budget.key, budget.limit, c.var.defer);
  for (const [k, v] of Object.entries(limitHeaders)) c.header(k, v);

  if ("broadcast" in target) {
    const now = Date.now();
    const cmd = { data: messageJson, publisher: sub, now, ...(idemKey ? { idempotencyKey: idemKey } : {}) };
    const delivered = await orUnavailable(
      "channel",
      () => broadcastToShards(c.env, channel.name, cmd),
      "retry with the same Idempotency-Key",
    );
    svc.metrics.inc("floodgate_messages_total", { result: "delivered" }, delivered.length);
    const shards = delivered.map((d) => d.shard);
    return c.json({ status: "delivered", channel: channel.name, shards, published_at: now }, 200);
  }
  const { key, shard } = target.audience;

  const decision = await beforePublish(key, {
    reader: svc.reader,
    analyticsChannel: config.analyticsChannel.name,
    thinning: thinningFor(config, channel) ? svc.thinning : null,
  });
  const now = Date.now();
  const copy = (counted: boolean): QueuedCopy => ({
    id: crypto.randomUUID(),
    source_channel: channel.name,
    ...(shard === null ? {} : { shard }),
    message: messageJson,
    publisher: sub,
    drop_rate: decision.rate,
    dropped_at: now,
    counted,
  });
  const defer = c.var.defer;

  if (decision.action === "drop" && !idemKey) {
    // The common drop: no object call on the response path; copy and count happen in the background.
    svc.metrics.inc("floodgate_messages_total", { result: "dropped" });
    // Only handed to waitUntil, never continued from here: the batch may belong to another request,
    // and code chained on another request's promise would run in that request's context.
    defer(svc.drops.enqueue(copy(false)));
    return c.json({ status: "dropped" }, 202);
  }

  const outcome = await orUnavailable<PublishOutcome>(
    "channel",
    () =>
      svc.publishBatcher.publish(
        {
          channel: key,
          data: messageJson,
          publisher: sub,
          action: decision.action,
          now,
          ...(idemKey ? { idempotencyKey: idemKey } : {}),
        },
        defer,
      ),
    "retry with the same Idempotency-Key",
  );

  if (outcome.status === "dropped") {
    if (!outcome.replayed) {
      svc.metrics.inc("floodgate_messages_total", { result: "dropped" });
      defer(svc.drops.enqueue(copy(true)));
    }
    return c.json({ status: "dropped" }, 202);
  }
  if (!outcome.replayed) svc.metrics.inc("floodgate_messages_total", { result: "delivered" });
  const { replayed: _, ...body } = outcome;
  return c.json(body, 200);
});
