/**
 * Runtime targets (docs/api.md, Operator routes: `/v1/admin/target/{channel}`), behind the admin
 * bearer: a target set here wins over `THROTTLE_TARGETS` / `THROTTLE_TARGET` (src/settings/rules.ts
 * `targetFor`), is held by the sampler's registry and handed to the channel's fast loop at once.
 */
import { Hono } from "hono";
import * as z from "zod";
import { shardKey } from "../../../functions/shard-key";
import { activeChannelsStub } from "../../platform/stubs";
import { LimitError } from "../../settings/limits";
import { targetFor } from "../../settings/rules";
import type { Settings } from "../../settings/settings";
import { parseTarget, type TargetJson, targetJson } from "../../settings/targets";
import type { ChannelName } from "../../wire/channel-names";
import type { AppEnv } from "../app-env";
import { orUnavailable } from "../http/errors";
import { ADMIN_ONLY, ChannelPath, documented, errors, json, route, TargetSchema } from "../http/openapi";
import { channelParam } from "../http/params";
import { bodyObject, custom, jsonBody } from "../http/validation";
import { countedChannelStub } from "../services";
import { shardNames } from "../shards/shard-view";
import { channelFirst, MAX_ADMIN_BODY } from "./admin";
import { runtimeTargets } from "./channel-view";

export const adminTargets = new Hono<AppEnv>();

const NOT_TARGET = 'body must be {"target": "50/s"} or {"target": {"deliveries": "5000/s"}}';

/** `PUT /v1/admin/target/{channel}`'s body: a positive target (DELETE clears one). */
const TargetBody = bodyObject(
  {
    target: z
      .unknown()
      .transform((value, ctx) => {
        try {
          const parsed = parseTarget(value);
          if (parsed) return parsed;
          ctx.addIssue(custom("target must be a positive rate; DELETE clears it", value));
        } catch (e) {
          if (!(e instanceof LimitError)) throw e;
          ctx.addIssue(custom(`target: ${e.message}`, value));
        }
        return z.NEVER;
      })
      .openapi({ allOf: [{ $ref: "#/components/schemas/Target" }] }),
  },
  NOT_TARGET,
).openapi("TargetRequest");

const TargetView = z
  .object({
    channel: z.string(),
    target: TargetSchema.nullable(),
    source: z.enum(["runtime", "config"]).nullable(),
    config_target: TargetSchema.nullable(),
  })
  .openapi("TargetView");

async function targetView(env: Env, config: Settings, channel: ChannelName) {
  const runtime = (await runtimeTargets(env))[channel.name];
  const configured = targetFor(config, channel);
  const effective = targetFor(config, channel, runtime);
  return {
    channel: channel.name,
    target: targetJson(effective),
    source: runtime !== undefined && effective ? "runtime" : configured ? "config" : null,
    config_target: targetJson(configured),
  };
}

/**
 * Gives the channel's fast loop its new target at once. Best effort: the registry holds the target
 * and the next sampler run hands it over anyway (docs/throttling.md, "Two loops").
 */
async function tellChannel(env: Env, channel: string, target: TargetJson | null): Promise<void> {
  try {
    await countedChannelStub(env, channel).setTarget(target);
  } catch (e) {
    console.error("floodgate: could not give the channel its target", e instanceof Error ? e.message : e);
  }
}

/** The objects a runtime target goes to: the channel's, and each shard its registry lists now. */
async function targetKeys(env: Env, config: Settings, channel: ChannelName): Promise<string[]> {
  const shards = await shardNames(env, config, channel);
  return [channel.name, ...shards.map((s) => shardKey(channel.name, s))];
}

const targetGet = route({
  method: "get",
  path: "/target/{channel}",
  summary: "Read a channel's target",
  security: ADMIN_ONLY,
  request: { params: ChannelPath },
  responses: {
    200: json(TargetView, "The effective target and where it comes from."),
    ...errors(400, 401, 429, 500, 503),
  },
});

adminTargets.get(documented(adminTargets, targetGet), async (c) => {
  const channel = channelParam(c.req.param("channel"));
  return c.json(await targetView(c.env, c.var.svc.config, channel));
});

const targetPut = route({
  method: "put",
  path: "/target/{channel}",
  summary: "Set a runtime target",
  description: "Wins over THROTTLE_TARGET(S) and makes the sampler visit the channel every run.",
  security: ADMIN_ONLY,
  request: { params: ChannelPath, body: { ...json(TargetBody, "The target."), required: true } },
  responses: { 200: json(TargetView, "The target now in force."), ...errors(400, 401, 413, 429, 500, 503) },
});

adminTargets.put(
  documented(adminTargets, targetPut),
  channelFirst(false),
  jsonBody(TargetBody, MAX_ADMIN_BODY),
  async (c) => {
    const channel = channelParam(c.req.param("channel"));
    const target = targetJson(c.req.valid("json").target);
    // A sharded channel's target applies to each shard on its own (docs/api.md, "Shards").
    for (const key of await targetKeys(c.env, c.var.svc.config, channel)) {
      await orUnavailable("sampler registry", () => activeChannelsStub(c.env).setTarget(key, target));
      await tellChannel(c.env, key, target);
    }
    return c.json(await targetView(c.env, c.var.svc.config, channel));
  },
);

const targetDelete = route({
  method: "delete",
  path: "/target/{channel}",
  summary: "Hand a channel back to the configured target",
  security: ADMIN_ONLY,
  request: { params: ChannelPath },
  responses: { 204: { description: "Cleared." }, ...errors(400, 401, 429, 500, 503) },
});

adminTargets.delete(documented(adminTargets, targetDelete), async (c) => {
  const channel = channelParam(c.req.param("channel"));
  for (const key of await targetKeys(c.env, c.var.svc.config, channel)) {
    await orUnavailable("sampler registry", () => activeChannelsStub(c.env).setTarget(key, null));
    await tellChannel(c.env, key, targetJson(targetFor(c.var.svc.config, channel)));
  }
  return c.body(null, 204);
});
