/**
 * The dashboard's one poll (docs/api.md, Operator routes: `GET /v1/admin/overview`): what the page
 * shows, from two object calls whatever the number of channels — the sampler's registry (channels
 * seen, their latest samples and summaries of drops, runtime targets) and the metrics object (deployment totals, rate-limit
 * decisions). No channel object is called; drop rates come from the isolate's drop-rate cache (KV).
 */
import { Hono } from "hono";
import * as z from "zod";
import { adminAuth } from "../../auth/authorise";
import { parseChannelName } from "../../channel/names";
import { targetJson, thinningFor } from "../../platform/config";
import { formatDuration } from "../../platform/durations";
import { RATE_LIMIT_BUCKETS, seriesKey } from "../../platform/metrics";
import { activeChannelsStub } from "../../platform/stubs";
import { type ChannelSample, effectiveTarget } from "../../throttle/sampler-run";
import { pointJson } from "../../throttle/throttle-series";
import type { AppEnv } from "../app-env";
import { targetRate } from "../channel-view";
import { orUnavailable } from "../errors";
import { ADMIN_ONLY, documented, errors, json, route, WithinQuery } from "../openapi";
import { withinParam } from "../params";
import { metricsSeries } from "./ops";

/** Channels one overview lists at most (the most recently seen). */
export const OVERVIEW_MAX_CHANNELS = 50;

/** Mounted under /v1/admin, behind the admin bearer like every admin route. */
export const dashboard = new Hono<AppEnv>();

/**
 * A channel's latest summary of drops as the card shows it (docs/api.md, "Summaries of drops"): its
 * interval, drops and largest keys, or null when it never sent one (or its rule is gone).
 */
function lastSummary(text: string | null) {
  if (text === null) return null;
  const { from, to, dropped, by_key } = JSON.parse(text) as {
    from: number;
    to: number;
    dropped: number;
    by_key: Record<string, number>;
  };
  return { from, to, dropped, by_key };
}

dashboard.use("*", adminAuth);

const overviewRoute = route({
  method: "get",
  path: "/overview",
  summary: "The dashboard's poll: recent channels from the sampler's registry, deployment totals",
  description:
    "Two object calls whatever the number of channels. A channel's occupancy and last_sample are the sampler's last period, not live counts. `series` holds both loops' decisions (fast loop and sweep) within `within`, oldest first, at most 180 per channel; `snapshot` is the newest of them.",
  security: ADMIN_ONLY,
  request: { query: WithinQuery },
  responses: {
    200: json(
      z
        .looseObject({ now: z.number().int(), within: z.string(), channels: z.array(z.looseObject({})) })
        .openapi("Overview"),
      `At most ${OVERVIEW_MAX_CHANNELS} channels, the most recently seen first.`,
    ),
    ...errors(400, 401, 429, 500, 503),
  },
});

dashboard.get(documented(dashboard, overviewRoute), async (c) => {
  const { config, reader } = c.get("svc");
  const withinMs = withinParam(c.req.query("within"));
  const now = Date.now();
  const [summary, series] = await Promise.all([
    orUnavailable("sampler registry", () => activeChannelsStub(c.env).overview(now - withinMs, OVERVIEW_MAX_CHANNELS)),
    orUnavailable("metrics", () => metricsSeries(c.env)),
  ]);
  const channels = await Promise.all(
    summary.channels.map(async ({ channel, at, sample, summary: dropSummary, series: points }) => {
      const name = parseChannelName(channel);
      const last = sample === null ? null : (JSON.parse(sample) as ChannelSample);
      const target = effectiveTarget(config, name, summary.targets[channel]);
      // Subscribers as the sampler last counted them: only a channel object knows them live.
      const occupancy = last?.occupancy ?? null;
      const recent = points.map(pointJson);
      return {
        channel,
        last_seen_at: at,
        drop_rate: channel === config.analyticsChannel.name ? 0 : (await reader.rateFor(channel)).rate,
        drop_mode: thinningFor(config, name) ? "thinning" : "random",
        target: targetJson(target),
        target_rate: targetRate(target, occupancy ?? 0),
        occupancy,
        last_sample: last,
        last_summary: lastSummary(dropSummary),
        // Both loops' decisions, oldest first, and the newest of them: the card's one snapshot, so
        // every number a card shows is of the same period.
        series: recent,
        snapshot: recent.at(-1) ?? null,
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
    // The record of dropped messages, for the analytics channel's card: copies recorded and failed.
    record: {
      channel: config.analyticsChannel.name,
      copies: count("floodgate_record_copies_total", {}),
      failures: count("floodgate_record_failures_total", {}),
    },
  });
});
