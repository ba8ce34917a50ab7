/**
 * The dashboard's one poll (docs/api.md, Operator routes: `GET /v1/admin/overview`): what the page
 * shows, from two object calls whatever the number of channels — the sampler's registry (channels
 * seen, their latest samples, runtime targets) and the metrics object (deployment totals, rate-limit
 * decisions). No channel object is called; drop rates come from the isolate's drop-rate cache (KV).
 */
import { Hono } from "hono";
import type { AppEnv } from "../app-env";
import { parseChannelName } from "../channels";
import { targetJson, thinningFor } from "../config";
import { DurationError, formatDuration, parseDuration } from "../durations";
import { invalidArgument, orUnavailable } from "../errors";
import { requireAdmin } from "../http";
import { RATE_LIMIT_BUCKETS, seriesKey } from "../metrics";
import { type ChannelSample, effectiveTarget } from "../sampler-run";
import { activeChannelsStub } from "../stubs";
import { metricsSeries, targetRate } from "./operator";

/** Channels one overview lists at most (the most recently seen). */
export const OVERVIEW_MAX_CHANNELS = 50;

export const dashboard = new Hono<AppEnv>();

dashboard.get("/v1/admin/overview", async (c) => {
  await requireAdmin(c.env, c.req.raw);
  const { config, reader } = c.get("svc");
  let withinMs: number;
  try {
    withinMs = parseDuration(c.req.query("within") ?? "10m");
  } catch (e) {
    if (e instanceof DurationError) throw invalidArgument('within must be a duration such as "10m"');
    throw e;
  }
  const now = Date.now();
  const [summary, series] = await Promise.all([
    orUnavailable("sampler registry", () => activeChannelsStub(c.env).overview(now - withinMs, OVERVIEW_MAX_CHANNELS)),
    orUnavailable("metrics", () => metricsSeries(c.env)),
  ]);
  const channels = await Promise.all(
    summary.channels.map(async ({ channel, at, sample }) => {
      const name = parseChannelName(channel);
      const last = sample === null ? null : (JSON.parse(sample) as ChannelSample);
      const target = effectiveTarget(config, name, summary.targets[channel]);
      // Subscribers as the sampler last counted them: only a channel object knows them live.
      const occupancy = last?.occupancy ?? null;
      return {
        channel,
        last_seen_at: at,
        drop_rate: channel === config.analyticsChannel.name ? 0 : (await reader.rateFor(channel)).rate,
        drop_mode: thinningFor(config, name) ? "thinning" : "random",
        target: targetJson(target),
        target_rate: targetRate(target, occupancy ?? 0),
        occupancy,
        last_sample: last,
      };
    }),
  );
  const count = (name: string, labels: Record<string, string>) => series[seriesKey(name, labels)] ?? 0;
  const decisions = (bucket: string) => ({
    allowed: count("floodgate_rate_limit_decisions_total", { bucket, result: "allowed" }),
    denied: count("floodgate_rate_limit_decisions_total", { bucket, result: "denied" }),
  });
  return c.json({
    now,
    within: formatDuration(withinMs),
    channels,
    messages: {
      delivered: count("floodgate_messages_total", { result: "delivered" }),
      dropped: count("floodgate_messages_total", { result: "dropped" }),
    },
    rate_limits: Object.fromEntries(RATE_LIMIT_BUCKETS.map((b) => [b, decisions(b)])),
  });
});
