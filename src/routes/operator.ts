/**
 * Operator routes (docs/api.md, Operator routes): health, manifest, metrics, channel stats and the admin API
 * for drop rates. Everything but health and the manifest needs the admin bearer.
 */
import { Hono } from "hono";
import { parseStoredRate, rateKey } from "../../functions/before-publish";
import { allowedMessageRate } from "../../functions/sampler";
import { samplerRegistry } from "../active-channels";
import { exportQuery, exportResponse } from "../analytics-export";
import type { AppEnv } from "../app-env";
import type { ChannelObject, ChannelStats } from "../channel-object";
import type { ChannelName } from "../channels";
import { type Config, parseTarget, type Target, type TargetJson, targetFor, targetJson, thinningFor } from "../config";
import { DurationError, formatDuration, parseDuration } from "../durations";
import { ApiError, invalidArgument, orUnavailable } from "../errors";
import { channelParam, readJson, requireAdmin } from "../http";
import { LimitError, limitToJson } from "../limits";
import { renderPrometheus, seriesKey } from "../metrics";
import { effectiveTarget, runSampler } from "../sampler-run";
import { weakSecrets } from "../secrets";
import { channelStub, objectId, type Services } from "../services";

/**
 * Messages per second the target lets through now: a delivery budget is split across the current
 * subscribers. Null with no target, or a delivery budget and nobody subscribed (no limit).
 */
export function targetRate(t: Target | null, occupancy: number): number | null {
  if (!t) return null;
  const rate = allowedMessageRate(t, occupancy);
  return Number.isFinite(rate) ? rate : null;
}

/** The public manifest (docs/api.md, Operator routes). Per-token overrides never appear. */
export function manifest(config: Config) {
  const perChannel = (rules: Config["perChannelPublish"]) =>
    rules.map((r) => ({ pattern: r.pattern.source, limit: limitToJson(r.value) }));
  const publish = perChannel(config.perChannelPublish);
  const subscribe = perChannel(config.perChannelSubscribe);
  return {
    rate_limits: {
      publish: limitToJson(config.publish),
      subscribe: limitToJson(config.subscribe),
      token_issue: limitToJson(config.tokenIssue),
      read: limitToJson(config.read),
      ...(publish.length ? { per_channel_publish: publish } : {}),
      ...(subscribe.length ? { per_channel_subscribe: subscribe } : {}),
    },
    throttle: {
      fallback_rate: config.throttleFallbackRate,
      target: targetJson(config.throttleTarget),
      ...(config.throttleTargets.length
        ? { targets: config.throttleTargets.map((r) => ({ pattern: r.pattern.source, target: targetJson(r.value) })) }
        : {}),
      ...(config.throttleThinning.length ? { thinning: config.throttleThinning.map((p) => p.source) } : {}),
      analytics_channel: config.analyticsChannel.name,
      rate_cache_ms: config.rateCacheMs,
      fast_period: formatDuration(config.samplerFastPeriodMs),
    },
  };
}

export const operator = new Hono<AppEnv>();

operator.get("/healthz", (c) => {
  // A weak secret is bad configuration: fail the health check so a deploy catches it.
  const weak = weakSecrets(c.env)[0];
  if (weak) throw new ApiError("internal", `server is not configured: ${weak.problem}`, { variable: weak.name });
  return c.json({ ok: true });
});

operator.get("/v1/manifest", (c) => c.json(manifest(c.get("svc").config)));

operator.get("/metrics", async (c) => {
  await requireAdmin(c.env, c.req.raw);
  const svc = c.get("svc");
  await svc.metrics.flushNow();
  const [series, expired] = await Promise.all([
    orUnavailable("metrics", () => metricsSeries(c.env)),
    expiredCopies(c.env, svc.config),
  ]);
  if (expired !== null) series.floodgate_analytics_expired_total = expired;
  return c.body(renderPrometheus(series), 200, { "content-type": "text/plain; version=0.0.4; charset=utf-8" });
});

function metricsSeries(env: Env): Promise<Record<string, number>> {
  return env.METRICS.get(env.METRICS.idFromName("metrics")).read();
}

/**
 * Copies the analytics channel's retention deleted, counted by its object (where they are deleted),
 * read at scrape time. A scrape is not traffic, so it is left out of `floodgate_object_calls_total`.
 * Null when the object cannot answer: the series is left out of that scrape rather than failing it.
 */
async function expiredCopies(env: Env, config: Config): Promise<number | null> {
  const stub: DurableObjectStub<ChannelObject> = env.CHANNEL.get(objectId(env.CHANNEL, config.analyticsChannel.name));
  try {
    return (await stub.recordCounts()).copies_expired_total;
  } catch (e) {
    console.error("floodgate: analytics channel unavailable for /metrics", e instanceof Error ? e.message : e);
    return null;
  }
}

/** The channel's target: one set at runtime (admin API) wins over THROTTLE_TARGET(S). */
async function targetOf(env: Env, config: Config, channel: ChannelName): Promise<Target | null> {
  const runtime = await orUnavailable("sampler registry", () => samplerRegistry(env).targets());
  return effectiveTarget(config, channel, runtime[channel.name]);
}

function channelStats(env: Env, channel: string): Promise<ChannelStats> {
  return orUnavailable("channel", () => channelStub(env, channel).stats());
}

/** The stored rate for a channel (or `*`), read straight from KV, not from the isolate cache. */
async function storedRate(env: Env, channel: string): Promise<number | null> {
  const text = await orUnavailable("drop-rate store", () => env.THROTTLE_KV.get(rateKey(channel)));
  return text === null ? null : parseStoredRate(text);
}

/** `{"channel","rate","target","last_sample"}` for the admin throttle routes. */
async function throttleView(env: Env, config: Config, name: string) {
  if (name === "*") {
    return {
      channel: "*",
      rate: await storedRate(env, "*"),
      target: targetJson(config.throttleTarget),
      last_sample: null,
    };
  }
  const channel = channelParam(name);
  const [rate, stats, target] = await Promise.all([
    storedRate(env, name),
    channelStats(env, name),
    targetOf(env, config, channel),
  ]);
  return { channel: name, rate, target: targetJson(target), last_sample: stats.last_sample };
}

operator.use("/v1/admin/*", async (c, next) => {
  await requireAdmin(c.env, c.req.raw);
  await next();
});

operator.get("/v1/admin/throttle/:channel", async (c) => {
  return c.json(await throttleView(c.env, c.get("svc").config, c.req.param("channel")));
});

operator.put("/v1/admin/throttle/:channel", async (c) => {
  const svc = c.get("svc");
  const name = c.req.param("channel");
  if (name !== "*") channelParam(name);
  const body = await readJson(c.req.raw, 1024);
  if (body === null || typeof body !== "object" || Array.isArray(body))
    throw invalidArgument('body must be {"rate": <number in [0,1]>}');
  const b = body as Record<string, unknown>;
  for (const k of Object.keys(b)) if (k !== "rate") throw invalidArgument(`unknown field "${k}"`);
  if (typeof b.rate !== "number" || !Number.isFinite(b.rate) || b.rate < 0 || b.rate > 1) {
    throw invalidArgument("rate must be a number between 0 and 1");
  }
  await orUnavailable("drop-rate store", () => c.env.THROTTLE_KV.put(rateKey(name), String(b.rate)));
  svc.reader.invalidate(name); // this isolate sees it at once; others within THROTTLE_RATE_CACHE_MS
  return c.json(await throttleView(c.env, svc.config, name));
});

operator.delete("/v1/admin/throttle/:channel", async (c) => {
  const svc = c.get("svc");
  const name = c.req.param("channel");
  if (name !== "*") channelParam(name);
  await orUnavailable("drop-rate store", () => c.env.THROTTLE_KV.delete(rateKey(name)));
  svc.reader.invalidate(name);
  return c.body(null, 204);
});

operator.post("/v1/admin/sample", async (c) => {
  const svc = c.get("svc");
  const report = await orUnavailable("sampler", () => runSampler(c.env, svc.config, Date.now(), svc.reader));
  return c.json(report);
});

operator.get("/v1/channels/:channel/stats", async (c) => {
  await requireAdmin(c.env, c.req.raw);
  const config = c.get("svc").config;
  const name = c.req.param("channel");
  const channel = channelParam(name);
  const [stats, rate, target] = await Promise.all([
    channelStats(c.env, name),
    c.get("svc").reader.rateFor(name),
    targetOf(c.env, config, channel),
  ]);
  const analytics = name === config.analyticsChannel.name;
  return c.json({
    channel: name,
    occupancy: stats.occupancy,
    websockets: stats.websockets,
    sse: stats.sse,
    relays: stats.relays,
    relay_sends_total: stats.relay_sends_total,
    last_seq: stats.last_seq,
    delivered_total: stats.delivered_total,
    dropped_total: stats.dropped_total,
    analytics_copy_failures_total: stats.analytics_copy_failures_total,
    slow_consumers_closed: stats.slow_consumers_closed,
    drop_rate: name === config.analyticsChannel.name ? 0 : rate.rate,
    drop_rate_source: rate.source,
    drop_mode: thinningFor(config, channel) ? "thinning" : "random",
    target: targetJson(target),
    target_rate: targetRate(target, stats.occupancy),
    last_sample: stats.last_sample,
    ...(analytics ? { record: await recordView(c.env, c.get("svc"), stats) } : {}),
  });
});

/**
 * The analytics channel's reconciliation: copies kept, expired and ever appended (its object's own
 * counts), beside the deployment's dropped messages and failed copies (the metrics), so that
 * `dropped_total = copies_total + copy_failures_total` can be checked by anyone once copies in
 * flight have landed.
 */
async function recordView(env: Env, svc: Services, stats: ChannelStats) {
  const config = svc.config;
  await svc.metrics.flushNow();
  const series = await orUnavailable("metrics", () => metricsSeries(env));
  const counts = stats.record ?? { copies_total: 0, copies_kept: 0, copies_expired_total: 0, oldest_dropped_at: null };
  return {
    retention: formatDuration(config.analyticsRetentionMs),
    ...counts,
    copy_failures_total: series.floodgate_analytics_copy_failures_total ?? 0,
    dropped_total: series[seriesKey("floodgate_messages_total", { result: "dropped" })] ?? 0,
  };
}

/** Runtime targets (docs/api.md, Operator routes): set from the dashboard or with curl. */
operator.get("/v1/admin/target/:channel", async (c) => {
  const channel = channelParam(c.req.param("channel"));
  return c.json(await targetView(c.env, c.get("svc").config, channel));
});

operator.put("/v1/admin/target/:channel", async (c) => {
  const channel = channelParam(c.req.param("channel"));
  const body = await readJson(c.req.raw, 1024);
  if (body === null || typeof body !== "object" || Array.isArray(body)) {
    throw invalidArgument('body must be {"target": "50/s"} or {"target": {"deliveries": "5000/s"}}');
  }
  const b = body as Record<string, unknown>;
  for (const k of Object.keys(b)) if (k !== "target") throw invalidArgument(`unknown field "${k}"`);
  let parsed: Target | null;
  try {
    parsed = parseTarget(b.target);
  } catch (e) {
    if (e instanceof LimitError) throw invalidArgument(`target: ${e.message}`);
    throw e;
  }
  if (!parsed) throw invalidArgument("target must be a positive rate; DELETE clears it");
  await orUnavailable("sampler registry", () => samplerRegistry(c.env).setTarget(channel.name, targetJson(parsed)));
  await tellChannel(c.env, channel.name, targetJson(parsed));
  return c.json(await targetView(c.env, c.get("svc").config, channel));
});

operator.delete("/v1/admin/target/:channel", async (c) => {
  const channel = channelParam(c.req.param("channel"));
  await orUnavailable("sampler registry", () => samplerRegistry(c.env).setTarget(channel.name, null));
  await tellChannel(c.env, channel.name, targetJson(targetFor(c.get("svc").config, channel)));
  return c.body(null, 204);
});

/**
 * Gives the channel's fast loop its new target at once. Best effort: the registry holds the target
 * and the next sampler run hands it over anyway (docs/throttling.md, "Two loops").
 */
async function tellChannel(env: Env, channel: string, target: TargetJson | null): Promise<void> {
  try {
    await channelStub(env, channel).setTarget(target);
  } catch (e) {
    console.error("floodgate: could not give the channel its target", e instanceof Error ? e.message : e);
  }
}

async function targetView(env: Env, config: Config, channel: ChannelName) {
  const runtime = (await orUnavailable("sampler registry", () => samplerRegistry(env).targets()))[channel.name];
  const configured = targetFor(config, channel);
  const effective = effectiveTarget(config, channel, runtime);
  return {
    channel: channel.name,
    target: targetJson(effective),
    source: runtime !== undefined && effective ? "runtime" : configured ? "config" : null,
    config_target: targetJson(configured),
  };
}

operator.get("/v1/admin/analytics/export", (c) => {
  const config = c.get("svc").config;
  return exportResponse(
    c.env,
    config,
    exportQuery((k) => c.req.query(k), config),
  );
});

/** Channels with traffic in the last `within` (default 10m), newest first, each with its stats. */
operator.get("/v1/admin/channels", async (c) => {
  const config = c.get("svc").config;
  let withinMs: number;
  try {
    withinMs = parseDuration(c.req.query("within") ?? "10m");
  } catch (e) {
    if (e instanceof DurationError) throw invalidArgument('within must be a duration such as "10m"');
    throw e;
  }
  const [seen, runtime] = await orUnavailable("sampler registry", () => {
    const registry = samplerRegistry(c.env);
    return Promise.all([registry.recentlySeen(Date.now() - withinMs, 50), registry.targets()]);
  });
  const channels = await Promise.all(
    seen.map(async ({ channel, at }) => {
      const name = channelParam(channel);
      const [stats, rate] = await Promise.all([channelStats(c.env, channel), c.get("svc").reader.rateFor(channel)]);
      const target = effectiveTarget(config, name, runtime[channel]);
      return {
        channel,
        last_seen_at: at,
        occupancy: stats.occupancy,
        delivered_total: stats.delivered_total,
        dropped_total: stats.dropped_total,
        drop_rate: rate.rate,
        drop_mode: thinningFor(config, name) ? "thinning" : "random",
        target: targetJson(target),
        target_rate: targetRate(target, stats.occupancy),
        last_sample: stats.last_sample,
      };
    }),
  );
  return c.json({ now: Date.now(), channels });
});
