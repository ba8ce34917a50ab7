/**
 * The dashboard's one poll (docs/api.md, Operator routes: `GET /v1/admin/overview`): what the page
 * shows, from two object calls whatever the number of channels — the sampler's registry (channels
 * seen, their latest samples and summaries of drops, runtime targets) and the metrics object (deployment totals, rate-limit
 * decisions). No channel object is called; drop rates come from the isolate's drop-rate cache (KV).
 */
import { Hono } from "hono";
import * as z from "zod";
import { splitShardKey } from "../../../functions/shard-key";
import { pointJson } from "../../active-channels/series";
import { RATE_LIMIT_BUCKETS, seriesKey } from "../../metrics/series";
import { activeChannelsStub } from "../../platform/stubs";
import { formatDuration } from "../../settings/durations";
import { isAnalytics, shardRuleFor, targetFor, thinningFor } from "../../settings/rules";
import type { Settings } from "../../settings/settings";
import { targetJson } from "../../settings/targets";
import { channelOfKey } from "../../wire/channel-names";
import type { AppEnv } from "../app-env";
import { orUnavailable } from "../http/errors";
import { ADMIN_ONLY, documented, errors, json, route, WithinQuery } from "../http/openapi";
import { withinParam } from "../http/params";
import type { ChannelSample } from "../sampler/sampler-run";
import { targetRate } from "./channel-view";
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
      const name = channelOfKey(channel);
      const last = sample === null ? null : (JSON.parse(sample) as ChannelSample);
      const target = targetFor(config, name, summary.targets[channel] ?? summary.targets[name.name]);
      // Subscribers as the sampler last counted them: only a channel object knows them live.
      const occupancy = last?.occupancy ?? null;
      const recent = points.map(pointJson);
      return {
        channel,
        last_seen_at: at,
        drop_rate: isAnalytics(config, channel) ? 0 : (await reader.rateFor(channel)).rate,
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
  const cards = shardCards(config, channels);
  const count = (name: string, labels: Record<string, string>) => series[seriesKey(name, labels)] ?? 0;
  const decisions = (bucket: string) => ({
    allowed: count("floodgate_rate_limit_decisions_total", { bucket, result: "allowed" }),
    denied: count("floodgate_rate_limit_decisions_total", { bucket, result: "denied" }),
  });
  return c.json({
    now,
    within: formatDuration(withinMs),
    channels: cards,
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

// ---- audience shards and the lever (docs/throttling.md, "Which lever") -----------------------------

/** One channel entry of the overview as built above (a shard's entry is named by its key). */
type OverviewEntry = {
  channel: string;
  occupancy: number | null;
  target_rate: number | null;
  last_sample: ChannelSample | null;
  last_seen_at: number;
} & Record<string, unknown>;

/** A channel one audience of which this many subscribers make points to sharding (when a grouping exists). */
export const SHARD_OCCUPANCY = 1000;
/** With no target, the message rate past which the numbers point to the throttle. */
export const THROTTLE_FREQUENCY = 10;

/** What a busy channel's numbers point to, and the rule that said so. */
export interface Lever {
  points_to: "throttle" | "shard" | "none";
  message_rate: number | null;
  occupancy: number | null;
  rule: string;
}

/**
 * The lever a channel's numbers point to: frequency (messages per second offered, over its target, or
 * over {@link THROTTLE_FREQUENCY} without one) points to the throttle; occupancy of at least
 * {@link SHARD_OCCUPANCY} in one audience points to sharding by a grouping. When both do, the one
 * further past its mark wins. A sharded channel is judged per shard, so its card shows each.
 */
export function leverOf(entry: OverviewEntry, sharding: { pattern: string; by: string } | null): Lever {
  const rate = entry.last_sample?.offered_rate ?? null;
  const occupancy = entry.occupancy;
  const rateMark = entry.target_rate ?? THROTTLE_FREQUENCY;
  const frequency = rate === null ? 0 : rate / rateMark;
  const crowd = occupancy === null ? 0 : occupancy / SHARD_OCCUPANCY;
  const ruleText = `frequency: ${rate === null ? "–" : rate.toFixed(1)}/s against ${rateMark}/s${
    entry.target_rate === null ? " (no target)" : " (target)"
  }; occupancy: ${occupancy ?? "–"} against ${SHARD_OCCUPANCY}`;
  if (frequency <= 1 && crowd < 1) return { points_to: "none", message_rate: rate, occupancy, rule: ruleText };
  if (frequency > crowd) return { points_to: "throttle", message_rate: rate, occupancy, rule: `${ruleText}: throttle` };
  const grouping = sharding
    ? `shard (AUDIENCE_SHARDS ${sharding.pattern} by ${sharding.by})`
    : "shard, if a grouping exists (AUDIENCE_SHARDS)";
  return { points_to: "shard", message_rate: rate, occupancy, rule: `${ruleText}: ${grouping}` };
}

/**
 * The overview's cards: one per channel, a sharded channel's shards gathered into its card. The card
 * keeps every field an unsharded channel's entry has (so the page draws it the same way): occupancy
 * is the shards' sum, drop rate the highest of theirs, `series` empty and `snapshot` null (the shards'
 * periods are their own, not the channel's), and `shards` lists each shard's own entry with its lever.
 * Every card has its lever and, when sharded, `sharding` (the rule).
 */
function shardCards(config: Settings, entries: OverviewEntry[]): Record<string, unknown>[] {
  const cards: Record<string, unknown>[] = [];
  const sharded = new Map<string, Record<string, unknown>[]>();
  for (const entry of entries) {
    const { channel, shard } = splitShardKey(entry.channel);
    if (shard === null) {
      const rule = shardRuleFor(config, channelOfKey(channel));
      const sharding = rule ? { pattern: rule.pattern.source, by: rule.value.by } : null;
      cards.push({ ...entry, lever: leverOf(entry, sharding) });
      continue;
    }
    let shards = sharded.get(channel);
    if (!shards) {
      shards = [];
      sharded.set(channel, shards);
      cards.push({ channel }); // filled in below, in the place of its most recently seen shard
    }
    shards.push({ ...entry, channel, shard });
  }
  return cards.map((card) => {
    const shards = sharded.get(card.channel as string);
    if (!shards || "last_seen_at" in card) return card;
    const rule = shardRuleFor(config, channelOfKey(card.channel as string));
    const sharding = rule ? { pattern: rule.pattern.source, by: rule.value.by } : null;
    const num = (s: Record<string, unknown>, k: string) => (typeof s[k] === "number" ? (s[k] as number) : 0);
    const first = shards[0] as OverviewEntry;
    const occupied = shards.some((s) => s.occupancy !== null);
    return {
      ...first,
      channel: card.channel,
      shard: undefined,
      last_seen_at: Math.max(...shards.map((s) => num(s, "last_seen_at"))),
      drop_rate: Math.max(...shards.map((s) => num(s, "drop_rate"))),
      occupancy: occupied ? shards.reduce((n, s) => n + num(s, "occupancy"), 0) : null,
      last_sample: null,
      // No period of its own: each shard's entry carries its series and snapshot (the page sums them),
      // never one shard's passed off as the channel's.
      series: [],
      snapshot: null,
      sharding,
      lever: {
        points_to: "shard",
        message_rate: null,
        occupancy: null,
        rule: `sharded by AUDIENCE_SHARDS ${sharding?.pattern ?? "?"} (${sharding?.by ?? "?"}): each shard judged on its own`,
      },
      shards: shards
        .map((s): Record<string, unknown> => ({ ...s, lever: leverOf(s as OverviewEntry, sharding) }))
        .sort((a, b) => String(a.shard).localeCompare(String(b.shard))),
    };
  });
}
