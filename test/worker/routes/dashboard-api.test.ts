/**
 * The admin routes the dashboard uses: its overview (one summary of the busy channels and the
 * deployment's totals), the list of recently active channels, and targets set at runtime (which the
 * sampler then follows, ahead of THROTTLE_TARGET(S)).
 */
import { runInDurableObject } from "cloudflare:test";
import { env } from "cloudflare:workers";
import { describe, expect, it } from "vitest";
import { rateKey } from "../../../functions/before-publish";
import { shardKey } from "../../../functions/shard-key";
import { activeChannelsStub } from "../../../src/platform/stubs";
import { OVERVIEW_MAX_CHANNELS } from "../../../src/worker/routes/dashboard";
import { member, pub, socket } from "../../support/audience-shards";
import { backdatePeriod, makeSeenReportDue } from "../../support/channel-internals";
import {
  adminHeaders,
  callAndWait,
  cron,
  envWith,
  mint,
  openSocket,
  publishAndWait,
  uniq,
  untilUnsubscribed,
} from "../../support/helpers";

const admin = (path: string, init: RequestInit = {}) => callAndWait(path, { ...init, headers: adminHeaders() });

interface OverviewChannel {
  channel: string;
  last_seen_at: number;
  drop_rate: number;
  drop_mode: string;
  target: unknown;
  target_rate: number | null;
  occupancy: number | null;
  last_sample: Record<string, unknown> | null;
}

interface Overview {
  now: number;
  within: string;
  channels: OverviewChannel[];
  messages: { delivered: number; dropped: number };
  rate_limits: Record<string, { allowed: number; denied: number }>;
  record: { channel: string; copies: number; failures: number };
}

async function overview(query = ""): Promise<Overview> {
  const res = await admin(`/v1/admin/overview${query}`);
  expect(res.status).toBe(200);
  return (await res.json()) as Overview;
}

/** One series of a `/metrics` scrape (which first flushes this isolate's counts to the metrics object). */
async function scrape(): Promise<(key: string) => number> {
  const text = await (await admin("/metrics")).text();
  return (key) => {
    const line = text.split("\n").find((l) => l.startsWith(`${key} `));
    if (!line) throw new Error(`no series ${key} in the scrape`);
    return Number(line.slice(key.length + 1));
  };
}

const CHANNEL_CALLS = 'floodgate_object_calls_total{object="channel"}';

describe("GET /v1/admin/overview", () => {
  it("summarises recently active channels and the deployment's totals without calling any channel object", async () => {
    const names = [1, 2, 3].map(() => `public:dash.${uniq("o")}`);
    const { access_token } = await mint({ sub: uniq(), channels: ["public:dash.*"], rl: "1000/s" });
    for (const ch of names) await publishAndWait(ch, access_token, { x: 1 });

    const before = (await scrape())(CHANNEL_CALLS);
    const body = await overview();
    const after = (await scrape())(CHANNEL_CALLS);
    expect(after - before).toBe(0);
    // The old list asks every channel it lists: the scrape does see channel calls.
    await admin("/v1/admin/channels");
    expect((await scrape())(CHANNEL_CALLS) - after).toBeGreaterThanOrEqual(names.length);

    expect(body.within).toBe("10m");
    const listed = body.channels.map((c) => c.channel);
    for (const ch of names) expect(listed).toContain(ch);
    expect(listed.indexOf(names[2] as string)).toBeLessThan(listed.indexOf(names[0] as string));
    expect(body.channels.find((c) => c.channel === names[0])).toEqual({
      channel: names[0],
      last_seen_at: expect.any(Number),
      drop_rate: 0,
      drop_mode: "random",
      target: null,
      target_rate: null,
      occupancy: null, // no target: never sampled, so no subscriber count without asking the channel
      last_sample: null,
      last_summary: null, // no summary rule: no summary of drops
      series: [],
      snapshot: null,
      // The lever its numbers point to (docs/throttling.md, "Which lever"): a quiet channel needs none.
      lever: expect.objectContaining({ points_to: "none" }),
    });
    expect(Object.keys(body.rate_limits).sort()).toEqual(["admin-auth", "publish", "read", "subscribe", "token-issue"]);
    expect(body.messages.delivered).toBeGreaterThanOrEqual(names.length);
  });

  it("agrees with the channel's stats after a sampler run, and with /metrics on the totals", async () => {
    const ch = `public:dash.${uniq("s")}`;
    const { access_token } = await mint({ sub: uniq(), channels: ["public:dash.*"], rl: "1000/s" });
    expect(
      (await admin(`/v1/admin/target/${ch}`, { method: "PUT", body: JSON.stringify({ target: "10/s" }) })).status,
    ).toBe(200);
    const sub = await openSocket(ch);
    for (let i = 0; i < 40; i++) await publishAndWait(ch, access_token, { i });
    await backdatePeriod(ch, 1000);
    expect((await admin("/v1/admin/sample", { method: "POST" })).status).toBe(200);
    // Traffic after the run reports the channel again (its once-a-minute report, made due here);
    // the registry's row keeps the sample.
    const seenBefore = (await overview()).channels.find((c) => c.channel === ch)?.last_seen_at ?? 0;
    await runInDurableObject(env.CHANNEL.get(env.CHANNEL.idFromName(ch)), makeSeenReportDue);
    await publishAndWait(ch, access_token, { after: true });

    const stats = (await (await admin(`/v1/channels/${ch}/stats`)).json()) as Record<string, unknown>;
    const entry = (await overview()).channels.find((c) => c.channel === ch);
    expect(stats.last_sample).toMatchObject({ channel: ch, target: "10/s", occupancy: 1 });
    expect(entry?.last_seen_at).toBeGreaterThan(seenBefore);
    expect(entry).toEqual({
      channel: ch,
      last_seen_at: expect.any(Number),
      drop_rate: stats.drop_rate,
      drop_mode: stats.drop_mode,
      target: stats.target,
      target_rate: stats.target_rate,
      occupancy: stats.occupancy,
      last_sample: stats.last_sample,
      last_summary: stats.last_summary,
      series: [expect.objectContaining({ by: "sweep", at: (stats.last_sample as { sampled_at: number }).sampled_at })],
      snapshot: expect.objectContaining({
        by: "sweep",
        drop_rate: (stats.last_sample as { new_rate: number }).new_rate,
      }),
      lever: expect.objectContaining({ occupancy: stats.occupancy }),
    });
    sub.ws.close();

    const metric = await scrape();
    const totals = await overview();
    expect(totals.messages).toEqual({
      delivered: metric('floodgate_messages_total{result="delivered"}'),
      dropped: metric('floodgate_messages_total{result="dropped"}'),
    });
    expect(totals.record).toEqual({
      channel: "private:floodgate.analytics.dropped",
      copies: metric("floodgate_record_copies_total"),
      failures: metric("floodgate_record_failures_total"),
    });
    for (const [bucket, counts] of Object.entries(totals.rate_limits)) {
      expect(counts).toEqual({
        allowed: metric(`floodgate_rate_limit_decisions_total{bucket="${bucket}",result="allowed"}`),
        denied: metric(`floodgate_rate_limit_decisions_total{bucket="${bucket}",result="denied"}`),
      });
    }
  });

  it(`lists at most ${OVERVIEW_MAX_CHANNELS} channels, the most recently seen`, async () => {
    // Seen half an hour ago: outside the default window the other tests of this file read.
    const at = Date.now() - 30 * 60_000;
    const seen = Array.from({ length: OVERVIEW_MAX_CHANNELS + 10 }, (_, i) => ({
      channel: `public:dash.${uniq("m")}`,
      at: at + i,
    }));
    await runInDurableObject(activeChannelsStub(env), (registry) => {
      for (const s of seen) registry.markSeen(s.channel, s.at);
    });
    const body = await overview("?within=1h");
    // 50 channels seen, each a card — except that the shards of one sharded channel (another test's,
    // in a shuffled run) share one card, which lists them: the rows still add up to 50.
    const rows = (body.channels as { shards?: unknown[] }[]).reduce((n, c) => n + (c.shards?.length ?? 1), 0);
    expect(rows).toBe(OVERVIEW_MAX_CHANNELS);
    const times = body.channels.map((c) => c.last_seen_at);
    expect(times).toEqual([...times].sort((a, b) => b - a));
    // Other tests' channels are newer; of these, the newest are listed and the oldest left out.
    const listed = new Set(body.channels.map((c) => c.channel));
    const kept = seen.filter((s) => listed.has(s.channel)).map((s) => s.channel);
    expect(kept.length).toBeGreaterThan(0);
    expect(kept).toEqual(seen.slice(-kept.length).map((s) => s.channel));
  });

  it("needs the admin token, like the other admin routes, and refuses a bad window", async () => {
    const { access_token } = await mint({ sub: uniq(), channels: ["public:dash.*"] });
    expect((await callAndWait("/v1/admin/overview")).status).toBe(401);
    const wrong = await callAndWait("/v1/admin/overview", { headers: { authorization: "Bearer not-the-admin" } });
    expect(wrong.status).toBe(401);
    expect(await wrong.json()).toMatchObject({ code: "unauthenticated" });
    const user = await callAndWait("/v1/admin/overview", { headers: { authorization: `Bearer ${access_token}` } });
    expect(user.status).toBe(401);
    expect((await admin("/v1/admin/overview?within=forever")).status).toBe(400);
  });
});

describe("a sharded channel's card", () => {
  it("passes off no one shard's period as the channel's: the card has none, each shard its own", async () => {
    // `public:sharded.fast.*`: shards by the token's group, each with a 1/s target (test/vitest.config.ts).
    const ch = `public:sharded.fast.${uniq()}`;
    const es = await member([ch], "es");
    const fr = await member([ch], "fr");
    const listener = await socket(ch, es);
    for (let i = 0; i < 4; i++) expect((await pub(ch, fr, i)).status).toBe(200);
    expect((await pub(ch, es, "x")).status).toBe(200);
    for (const g of ["es", "fr"]) await backdatePeriod(shardKey(ch, g), 10_000);
    expect((await admin("/v1/admin/sample", { method: "POST" })).status).toBe(200);

    const card = (await overview()).channels.find((c) => c.channel === ch) as unknown as {
      occupancy: number;
      series: unknown[];
      snapshot: unknown;
      shards: { shard: string; snapshot: { occupancy: number; delivered: number } | null }[];
    };
    // Before: the card spread its most recently seen shard's series and snapshot, so the page showed
    // `fr`'s 0 subscribers beside `fr`'s deliveries as the whole channel's.
    expect(card.series).toEqual([]);
    expect(card.snapshot).toBeNull();
    expect(card.occupancy).toBe(1);
    const snap = Object.fromEntries(card.shards.map((s) => [s.shard, s.snapshot]));
    expect(snap.es).toMatchObject({ occupancy: 1, delivered: 1 });
    expect(snap.fr).toMatchObject({ occupancy: 0, delivered: 4 });
    listener.ws.close();
  });
});

describe("GET /v1/admin/channels", () => {
  it("lists channels with recent traffic, with or without a target, newest first, with their totals", async () => {
    const quiet = `public:dash.${uniq("a")}`;
    const busy = `public:dash.${uniq("b")}`;
    const { access_token } = await mint({ sub: uniq(), channels: ["public:dash.*"], rl: "1000/s" });
    await publishAndWait(quiet, access_token, { x: 1 });
    for (let i = 0; i < 3; i++) await publishAndWait(busy, access_token, { i });
    const res = await admin("/v1/admin/channels");
    expect(res.status).toBe(200);
    const body = (await res.json()) as { channels: { channel: string; delivered_total: number; target: unknown }[] };
    const names = body.channels.map((c) => c.channel);
    expect(names).toContain(quiet);
    expect(names).toContain(busy);
    expect(names.indexOf(busy)).toBeLessThan(names.indexOf(quiet));
    expect(body.channels.find((c) => c.channel === busy)).toMatchObject({
      delivered_total: 3,
      target: null,
      target_rate: null,
    });
    expect((await callAndWait("/v1/admin/channels")).status).toBe(401);
    expect((await admin("/v1/admin/channels?within=forever")).status).toBe(400);
  });
});

describe("one view of a channel", () => {
  it("the stats route and the channel list agree, the analytics channel's zero drop rate included", async () => {
    // An analytics channel of this test's own, with a drop rate stored for it that must not show:
    // the analytics channel is never throttled.
    const analytics = `private:floodgate.analytics.${uniq()}`;
    const plain = `public:dash.${uniq()}`;
    const e = envWith({ ANALYTICS_CHANNEL: analytics });
    await env.THROTTLE_KV.put(rateKey(analytics), "0.5");
    await env.THROTTLE_KV.put(rateKey(plain), "0.25");
    const registry = activeChannelsStub(env);
    await registry.markSeen(analytics);
    await registry.markSeen(plain);
    const get = async (path: string) => {
      const res = await callAndWait(path, { headers: adminHeaders() }, e);
      expect(res.status).toBe(200);
      return (await res.json()) as Record<string, unknown>;
    };
    const listed = (await get("/v1/admin/channels")).channels as Record<string, unknown>[];
    for (const [channel, rate] of [
      [analytics, 0],
      [plain, 0.25],
    ] as const) {
      const stats = await get(`/v1/channels/${channel}/stats`);
      const entry = listed.find((c) => c.channel === channel);
      expect(entry).toBeDefined();
      expect(stats.drop_rate).toBe(rate);
      for (const [field, value] of Object.entries(entry ?? {})) {
        if (field !== "last_seen_at") expect(stats[field], `${channel} ${field}`).toEqual(value);
      }
    }
  });
});

describe("runtime targets", () => {
  it("a target set through the API is sampled like a configured one, and DELETE hands back to the config", async () => {
    const ch = `public:dash.${uniq()}`;
    const { access_token } = await mint({ sub: uniq(), channels: ["public:dash.*"], rl: "1000/s" });
    const put = await admin(`/v1/admin/target/${ch}`, { method: "PUT", body: JSON.stringify({ target: "10/s" }) });
    expect(put.status).toBe(200);
    expect(await put.json()).toEqual({ channel: ch, target: "10/s", source: "runtime", config_target: null });
    for (let i = 0; i < 40; i++) await publishAndWait(ch, access_token, { i });
    await backdatePeriod(ch, 1000);
    await cron();
    const rate = Number(await env.THROTTLE_KV.get(rateKey(ch)));
    expect(rate).toBeGreaterThan(0.7); // ~40/s offered against 10/s
    const stats = (await (await admin(`/v1/channels/${ch}/stats`)).json()) as { target: unknown };
    expect(stats).toMatchObject({ target: "10/s", target_rate: 10 });
    const listed = (await (await admin("/v1/admin/channels")).json()) as { channels: { channel: string }[] };
    expect(listed.channels.find((c) => c.channel === ch)).toMatchObject({ target: "10/s", target_rate: 10 });

    expect((await admin(`/v1/admin/target/${ch}`, { method: "DELETE" })).status).toBe(204);
    expect(await (await admin(`/v1/admin/target/${ch}`)).json()).toEqual({
      channel: ch,
      target: null,
      source: null,
      config_target: null,
    });
  });

  it("refuses bad targets with 400 and changes nothing", async () => {
    const ch = `public:dash.${uniq()}`;
    for (const body of [{ target: "fast" }, { target: "0/s" }, { target: 5 }, { target: "5/s", extra: 1 }, []]) {
      const res = await admin(`/v1/admin/target/${ch}`, { method: "PUT", body: JSON.stringify(body) });
      expect(res.status, JSON.stringify(body)).toBe(400);
    }
    expect(((await (await admin(`/v1/admin/target/${ch}`)).json()) as { target: unknown }).target).toBeNull();
    const budget = await admin(`/v1/admin/target/${ch}`, {
      method: "PUT",
      body: JSON.stringify({ target: { deliveries: "5000/s" } }),
    });
    expect(await budget.json()).toMatchObject({ target: { deliveries: "5000/s" }, source: "runtime" });
    // A delivery budget is split across subscribers; with none there is no limit to draw.
    expect(await (await admin(`/v1/channels/${ch}/stats`)).json()).toMatchObject({ target_rate: null });
    const sub = await openSocket(ch);
    const sub2 = await openSocket(ch);
    expect(await (await admin(`/v1/channels/${ch}/stats`)).json()).toMatchObject({ target_rate: 2500 });
    sub.ws.close();
    sub2.ws.close();
    await untilUnsubscribed(ch);
  });
});
