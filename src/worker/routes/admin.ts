/**
 * The admin API (docs/api.md, Operator routes), mounted at `/v1/admin`, every route behind the admin
 * bearer: drop rates, the sampler, the analytics export and the list of active channels (the
 * dashboard's). Runtime targets are in ./admin-targets.ts.
 */
import { Hono } from "hono";
import { createMiddleware } from "hono/factory";
import * as z from "zod";
import { parseStoredRate, rateKey } from "../../../functions/before-publish";
import { splitShardKey } from "../../../functions/shard-key";
import { activeChannelsStub } from "../../platform/stubs";
import { shardRuleFor, targetFor } from "../../settings/rules";
import type { Settings } from "../../settings/settings";
import { targetJson } from "../../settings/targets";
import { invalidArgument } from "../../wire/errors";
import type { AppEnv } from "../app-env";
import { orUnavailable } from "../http/errors";
import { ADMIN_ONLY, documented, errors, json, route, TargetSchema, WithinQuery } from "../http/openapi";
import { channelParam, withinParam } from "../http/params";
import { bodyObject, jsonBody } from "../http/validation";
import { exportQuery, exportResponse } from "../record/export";
import { runSampler } from "../sampler/sampler-run";
import { namedAudience } from "../shards/audience";
import { shardRateKeys } from "../shards/shard-rates";
import { ChannelViewSchema, channelStats, channelView, targetOf } from "./channel-view";

/** Admin bodies are a few fields: anything longer is not one. */
export const MAX_ADMIN_BODY = 1024;

export const admin = new Hono<AppEnv>();

/**
 * Checks the `{channel}` parameter before the body is read, so a bad channel is the error named
 * whatever the body holds. `star`: the throttle routes also take `*`, the global key.
 */
export const channelFirst = (star: boolean) =>
  createMiddleware<AppEnv>(async (c, next) => {
    const name = c.req.param("channel");
    if (!(star && name === "*")) channelParam(name);
    await next();
  });

const ThrottleChannelPath = z.object({
  channel: z.string().openapi({
    param: { name: "channel", in: "path" },
    description: "A channel name, or `*` for the global key `throttleRate`.",
    example: "public:live.reactions",
  }),
});

const RATE = "rate must be a number between 0 and 1";

/** `PUT /v1/admin/throttle/{channel}`'s body. */
const ThrottleBody = bodyObject(
  {
    rate: z
      .number({ error: RATE })
      .min(0, { error: RATE })
      .max(1, { error: RATE })
      .openapi({ description: "The drop rate, in [0,1].", example: 0.25 }),
  },
  'body must be {"rate": <number in [0,1]>}',
).openapi("ThrottleRequest");

const ThrottleView = z
  .object({
    channel: z.string(),
    shard: z.string().optional().openapi({ description: "With `?shard=`: the shard the rate is of." }),
    rate: z.number().nullable().openapi({ description: "The stored rate, read from KV; null when none is stored." }),
    target: TargetSchema.nullable(),
    last_sample: z.unknown().openapi({ description: "The sampler's latest entry for the channel, or null." }),
  })
  .openapi("ThrottleView");

/** The stored rate for a channel (or `*`), read straight from KV, not from the isolate cache. */
async function storedRate(env: Env, channel: string): Promise<number | null> {
  const text = await orUnavailable("drop-rate store", () => env.THROTTLE_KV.get(rateKey(channel)));
  return text === null ? null : parseStoredRate(text);
}

/** `{"channel","rate","target","last_sample"}` for the throttle routes. */
async function throttleView(env: Env, config: Settings, name: string) {
  if (name === "*") {
    return {
      channel: "*",
      rate: await storedRate(env, "*"),
      target: targetJson(config.throttleTarget),
      last_sample: null,
    };
  }
  // A shard's key (functions/shard-key.ts) shows its channel and shard; its target is its channel's.
  const { channel: channelName, shard } = splitShardKey(name);
  const channel = channelParam(channelName);
  const [rate, stats, target] = await Promise.all([
    storedRate(env, name),
    channelStats(env, name),
    targetOf(env, config, channel),
  ]);
  return {
    channel: channelName,
    ...(shard === null ? {} : { shard }),
    rate,
    target: targetJson(target),
    last_sample: stats.last_sample,
  };
}

/** `?shard=` on the throttle routes (docs/api.md, "Shards"). */
const ShardQuery = z.object({
  shard: z
    .string()
    .optional()
    .openapi({
      description:
        "Sharded channels only: one shard's rate. Without it a PUT or DELETE acts on every shard, those that " +
        "appear later too (a shard without a rate of its own runs at its channel's). On a channel no rule " +
        "shards, or a name no shard can have: 400.",
    }),
});

/**
 * The KV key a throttle route acts on: the channel's (or `*`'s); `?shard=<name>`, that shard's. A
 * sharded channel without `shard` means all its shards, those that appear later too: its own key, and
 * the shards' own keys go (`shardKeys`), so every shard falls back to it (functions/before-publish.ts).
 * @throws ApiError 400 for `shard` on `*` or an unsharded channel, or a name no shard can have
 */
async function throttleKeys(env: Env, config: Settings, name: string, shard: string | undefined) {
  if (name === "*") {
    if (shard !== undefined) throw invalidArgument("shard: the global key has no shards");
    return { view: name, key: rateKey(name), shardKeys: [] };
  }
  const channel = channelParam(name);
  const rule = shardRuleFor(config, channel);
  if (shard !== undefined) {
    if (!rule) throw invalidArgument(`shard: channel ${name} is not sharded (AUDIENCE_SHARDS)`);
    const audience = namedAudience(channel, rule.value, shard);
    if (!audience) throw invalidArgument(`shard: "${shard}" cannot be a shard of ${name}`);
    return { view: audience.key, key: rateKey(audience.key), shardKeys: [] };
  }
  const shardKeys = rule ? await orUnavailable("drop-rate store", () => shardRateKeys(env.THROTTLE_KV, name)) : [];
  return { view: name, key: rateKey(name), shardKeys };
}

const throttleGet = route({
  method: "get",
  path: "/throttle/{channel}",
  summary: "Read a channel's drop rate",
  security: ADMIN_ONLY,
  request: { params: ThrottleChannelPath, query: ShardQuery },
  responses: { 200: json(ThrottleView, "The rate, target and latest sample."), ...errors(400, 401, 429, 500, 503) },
});

admin.get(documented(admin, throttleGet), async (c) => {
  const config = c.var.svc.config;
  const { view } = await throttleKeys(c.env, config, c.req.param("channel"), c.req.query("shard"));
  return c.json(await throttleView(c.env, config, view));
});

const throttlePut = route({
  method: "put",
  path: "/throttle/{channel}",
  summary: "Write a channel's drop rate",
  description: "Other isolates see it within THROTTLE_RATE_CACHE_MS.",
  security: ADMIN_ONLY,
  request: {
    params: ThrottleChannelPath,
    query: ShardQuery,
    body: { ...json(ThrottleBody, "The rate."), required: true },
  },
  responses: { 200: json(ThrottleView, "The rate now stored."), ...errors(400, 401, 413, 429, 500, 503) },
});

admin.put(documented(admin, throttlePut), channelFirst(true), jsonBody(ThrottleBody, MAX_ADMIN_BODY), async (c) => {
  const svc = c.var.svc;
  const { rate } = c.req.valid("json");
  const { view, key, shardKeys } = await throttleKeys(c.env, svc.config, c.req.param("channel"), c.req.query("shard"));
  await orUnavailable("drop-rate store", async () => {
    await c.env.THROTTLE_KV.put(key, String(rate));
    await Promise.all(shardKeys.map((k) => c.env.THROTTLE_KV.delete(k)));
  });
  svc.reader.invalidate(view); // this isolate sees it at once (shards too); others within THROTTLE_RATE_CACHE_MS
  return c.json(await throttleView(c.env, svc.config, view));
});

const throttleDelete = route({
  method: "delete",
  path: "/throttle/{channel}",
  summary: "Remove a channel's drop rate",
  security: ADMIN_ONLY,
  request: { params: ThrottleChannelPath, query: ShardQuery },
  responses: { 204: { description: "Removed." }, ...errors(400, 401, 429, 500, 503) },
});

admin.delete(documented(admin, throttleDelete), channelFirst(true), async (c) => {
  const { view, key, shardKeys } = await throttleKeys(
    c.env,
    c.var.svc.config,
    c.req.param("channel"),
    c.req.query("shard"),
  );
  await orUnavailable("drop-rate store", () =>
    Promise.all([key, ...shardKeys].map((k) => c.env.THROTTLE_KV.delete(k))),
  );
  c.var.svc.reader.invalidate(view);
  return c.body(null, 204);
});

const sampleRoute = route({
  method: "post",
  path: "/sample",
  summary: "Run the sampler now",
  description: "The same code as the Cron Trigger; see docs/throttling.md.",
  security: ADMIN_ONLY,
  responses: {
    200: json(
      z
        .object({
          ran_at: z.number().int(),
          previous_run_at: z.number().int().nullable(),
          channels: z.array(
            z.looseObject({ channel: z.string() }).openapi({
              description: 'A sample, `{"channel","skipped"}` or `{"channel","error"}` (docs/api.md, Operator routes).',
            }),
          ),
        })
        .openapi("SamplerReport"),
      "What the sampler decided, one entry per channel visited, sorted by name.",
    ),
    ...errors(401, 429, 500, 503),
  },
});

admin.post(documented(admin, sampleRoute), async (c) => {
  const svc = c.var.svc;
  return c.json(await orUnavailable("sampler", () => runSampler(c.env, svc.config, Date.now(), svc.reader)));
});

const exportRoute = route({
  method: "get",
  path: "/analytics/export",
  summary: "Export dropped-message copies as NDJSON",
  description:
    "Every copy in the record (RECORD_BUCKET) whose `dropped_at` is in [`from`, `to`), exactly once, one record " +
    "line per line as stored (`id`, `source_channel`, `message`, `publisher`, `drop_rate`, `dropped_at`), hours " +
    "in order and lines in `dropped_at` order within an hour. Streamed an hour at a time; if it fails mid-stream " +
    "the response ends early. A range longer than RECORD_RETENTION, or with `to` ≤ `from`, answers 400; an hour with " +
    "more than 256 objects overlapping in drop time answers 503 (`Floodgate-Refusal: export_too_dense`): query it in place.",
  security: ADMIN_ONLY,
  request: {
    query: z.object({
      from: z.string().openapi({ description: "Epoch milliseconds, required." }),
      to: z.string().openapi({ description: "Epoch milliseconds, required, later than `from`." }),
      source_channel: z.string().optional().openapi({ description: "Only copies of drops from this channel." }),
    }),
  },
  responses: {
    200: { description: "One copy per line.", content: { "application/x-ndjson": { schema: z.string() } } },
    ...errors(400, 401, 429, 500, 503),
  },
});

admin.get(documented(admin, exportRoute), (c) => {
  const config = c.var.svc.config;
  return exportResponse(
    c.env,
    config,
    exportQuery((k) => c.req.query(k), config),
  );
});

const ChannelListEntry = ChannelViewSchema.omit({ drop_rate_source: true })
  .extend({ last_seen_at: z.number().int().openapi({ description: "Epoch milliseconds." }) })
  .openapi("ChannelListEntry");

const channelsRoute = route({
  method: "get",
  path: "/channels",
  summary: "Channels with recent traffic (the dashboard's list)",
  security: ADMIN_ONLY,
  request: { query: WithinQuery },
  responses: {
    200: json(
      z.object({ now: z.number().int(), channels: z.array(ChannelListEntry) }).openapi("ChannelList"),
      "At most 50 channels, newest first.",
    ),
    ...errors(400, 401, 429, 500, 503),
  },
});

/** Channels with traffic in the last `within` (default 10m), newest first, each with its view. */
admin.get(documented(admin, channelsRoute), async (c) => {
  const svc = c.var.svc;
  const withinMs = withinParam(c.req.query("within"));
  const [seen, runtime] = await orUnavailable("sampler registry", () => {
    const registry = activeChannelsStub(c.env);
    return Promise.all([registry.recentlySeen(Date.now() - withinMs, 50), registry.targets()]);
  });
  const channels = await Promise.all(
    seen.map(async ({ channel, at }) => {
      // A shard is listed as its channel's entry with its `shard` (docs/api.md, "Shards").
      const { channel: base, shard } = splitShardKey(channel);
      const name = channelParam(base);
      const target = Promise.resolve(targetFor(svc.config, name, runtime[channel] ?? runtime[base]));
      const { view } = await channelView(c.env, svc, name, target, channel);
      const { channel: listed, drop_rate_source: _, ...rest } = view;
      return { channel: listed, ...(shard === null ? {} : { shard }), last_seen_at: at, ...rest };
    }),
  );
  return c.json({ now: Date.now(), channels });
});
