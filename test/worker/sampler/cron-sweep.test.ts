/**
 * The sampler's Cron Trigger in workerd: real channel objects, real KV, the real registry.
 * Targets come from test/vitest.config.ts: `public:sampled.**` → 10/s, `public:budget.*` →
 * {"deliveries":"40/s"}.
 */
import { runInDurableObject } from "cloudflare:test";
import { env } from "cloudflare:workers";
import { describe, expect, it } from "vitest";
import { rateKey } from "../../../functions/before-publish";
import { ChannelObject } from "../../../src/channel/channel-object";
import { activeChannelsStub, channelStub } from "../../../src/platform/stubs";
import type { ChannelSample, SamplerReport } from "../../../src/worker/sampler/sampler-run";
import { backdatePeriod, channelOf, counter, rememberChannel, setCounters } from "../../support/channel-internals";
import {
  adminHeaders,
  callAndWait,
  cron,
  envWith,
  openSocket,
  publishAndWait,
  publisher,
  SLOW_TEST_MS,
  uniq,
  withFailing,
} from "../../support/helpers";

const stubOf = (name: string) => channelStub(env, name);
const registry = () => activeChannelsStub(env);

async function publishMany(channel: string, token: string, n: number): Promise<void> {
  for (let i = 0; i < n; i++) {
    const res = await publishAndWait(channel, token, { i });
    expect([200, 202]).toContain(res.status);
  }
}

describe("scheduled sampler", () => {
  it("writes the rate that holds the target after traffic, and records the sample", async () => {
    const ch = `public:sampled.${uniq()}`;
    const token = await publisher("public:sampled.*", "10000/s");
    await publishMany(ch, token, 40);
    expect((await registry().snapshot()).active).toContain(ch);
    // 40 messages over ~2 s is ~20/s offered against a 10/s target: drop about half.
    await backdatePeriod(ch, 2000);
    await cron();
    const rate = Number(await env.THROTTLE_KV.get(rateKey(ch)));
    expect(rate).toBeGreaterThan(0.46);
    expect(rate).toBeLessThanOrEqual(0.5);
    const stats = (await (await callAndWait(`/v1/channels/${ch}/stats`, { headers: adminHeaders() })).json()) as {
      last_sample: ChannelSample;
    };
    expect(stats.last_sample).toMatchObject({ channel: ch, offered: 40, delivered: 40, dropped: 0, written: true });
    expect(stats.last_sample.new_rate).toBe(rate);
    expect(stats.last_sample.old_rate).toBeNull();
    expect(stats.last_sample.elapsed_ms).toBeGreaterThanOrEqual(2000);
    // Sampled: the mark is gone, and the channel is kept as throttled until released.
    const snap = await registry().snapshot();
    expect(snap.active).not.toContain(ch);
    expect(snap.throttled).toContain(ch);
  });

  it("releases an idle throttled channel to 0 at the next run, deleting its key, then forgets it", async () => {
    const ch = `public:sampled.${uniq()}`;
    const token = await publisher("public:sampled.*", "10000/s");
    await publishMany(ch, token, 40);
    await backdatePeriod(ch, 1000);
    await cron();
    expect(Number(await env.THROTTLE_KV.get(rateKey(ch)))).toBeGreaterThan(0.7);
    await backdatePeriod(ch, 60_000); // a quiet minute
    await cron();
    // Released to the default (the global rate, 0 here): the key goes, so released channels leave no keys behind.
    expect(await env.THROTTLE_KV.get(rateKey(ch))).toBeNull();
    const stats = (await (await callAndWait(`/v1/channels/${ch}/stats`, { headers: adminHeaders() })).json()) as {
      last_sample: ChannelSample;
      drop_rate: number;
    };
    expect(stats.last_sample).toMatchObject({ new_rate: 0, written: false, deleted: true });
    expect(stats.drop_rate).toBe(0);
    expect((await registry().snapshot()).throttled).not.toContain(ch);
  });

  it("leaves channels without a target alone", async () => {
    const ch = `public:unsampled.${uniq()}`;
    const token = await publisher("public:unsampled.*", "10000/s");
    await publishMany(ch, token, 10);
    expect((await registry().snapshot()).active).not.toContain(ch);
    await cron();
    expect(await env.THROTTLE_KV.get(rateKey(ch))).toBeNull();
  });

  it("never throttles the analytics channel, even when a global target would match it", async () => {
    const analytics = "private:floodgate.analytics.dropped";
    await registry().markActive(analytics);
    const res = await callAndWait(
      "/v1/admin/sample",
      { method: "POST", headers: adminHeaders() },
      envWith({ THROTTLE_TARGET: "1/s" }),
    );
    expect(res.status).toBe(200);
    const report = (await res.json()) as SamplerReport;
    expect(report.channels.find((c) => c.channel === analytics)).toEqual({
      channel: analytics,
      skipped: "analytics channel",
    });
    expect(await env.THROTTLE_KV.get(rateKey(analytics))).toBeNull();
  });

  it("one channel's object failing does not stop the others, and the failed one is retried next run", async () => {
    const bad = `public:sampled.${uniq("bad")}`;
    const good = `public:sampled.${uniq("good")}`;
    const token = await publisher("public:sampled.*", "10000/s");
    await publishMany(bad, token, 30);
    await publishMany(good, token, 30);
    await backdatePeriod(good, 1000);
    await withFailing(ChannelObject, "takePeriod", "SQLITE_BUSY: internal detail", cron, (o) => channelOf(o) === bad);
    expect(Number(await env.THROTTLE_KV.get(rateKey(good)))).toBeGreaterThan(0.6);
    expect(await env.THROTTLE_KV.get(rateKey(bad))).toBeNull();
    expect((await registry().snapshot()).active).toContain(bad);
    // Next run, the object works again and the channel is sampled.
    await backdatePeriod(bad, 1000);
    await cron();
    expect(Number(await env.THROTTLE_KV.get(rateKey(bad)))).toBeGreaterThan(0.6);
  });

  it("POST /v1/admin/sample runs the same sampler on demand and reports each decision, without backend text", async () => {
    const bad = `public:sampled.${uniq("bad")}`;
    const token = await publisher("public:sampled.*", "10000/s");
    await publishMany(bad, token, 5);
    const res = await withFailing(
      ChannelObject,
      "takePeriod",
      "SQLITE_BUSY: internal detail",
      () => callAndWait("/v1/admin/sample", { method: "POST", headers: adminHeaders() }),
      (o) => channelOf(o) === bad,
    );
    expect(res.status).toBe(200);
    const text = await res.text();
    expect(text).not.toContain("SQLITE");
    const report = JSON.parse(text) as SamplerReport;
    expect(report.channels.find((c) => c.channel === bad)).toEqual({
      channel: bad,
      error: "channel unavailable; retried next run",
    });
    expect((await callAndWait("/v1/admin/sample", { method: "POST" })).status).toBe(401);
  });

  it("splits a delivery budget across the channel's subscribers", async () => {
    const ch = `public:budget.${uniq()}`;
    const token = await publisher("public:budget.*", "10000/s");
    const sockets = await Promise.all([openSocket(ch), openSocket(ch), openSocket(ch), openSocket(ch)]);
    await publishMany(ch, token, 40);
    await backdatePeriod(ch, 1000);
    await cron();
    // 40 deliveries/s across 4 subscribers allows 10 messages/s; ~40/s offered: drop about 3/4.
    const rate = Number(await env.THROTTLE_KV.get(rateKey(ch)));
    expect(rate).toBeGreaterThan(0.7);
    expect(rate).toBeLessThanOrEqual(0.75);
    const stats = (await (await callAndWait(`/v1/channels/${ch}/stats`, { headers: adminHeaders() })).json()) as {
      last_sample: ChannelSample;
    };
    expect(stats.last_sample).toMatchObject({ occupancy: 4, target: { deliveries: "40/s" }, allowed_rate: 10 });
    for (const s of sockets) s.ws.close();
  });

  it("a rate the sampler wrote takes effect at once in this isolate; thinning drops exactly that share", {
    timeout: SLOW_TEST_MS,
  }, async () => {
    const ch = `public:sampled.thin.${uniq()}`; // THROTTLE_THINNING covers public:sampled.thin.*
    const token = await publisher("public:sampled.thin.*", "10000/s");
    await publishMany(ch, token, 40);
    await backdatePeriod(ch, 1000);
    await cron();
    const rate = Number(await env.THROTTLE_KV.get(rateKey(ch)));
    expect(rate).toBeGreaterThan(0.7);
    let dropped = 0;
    for (let i = 0; i < 200; i++) if ((await publishAndWait(ch, token, { i })).status === 202) dropped++;
    expect(Math.abs(dropped - 200 * rate)).toBeLessThanOrEqual(1);
    const stats = (await (await callAndWait(`/v1/channels/${ch}/stats`, { headers: adminHeaders() })).json()) as {
      drop_mode: string;
    };
    expect(stats.drop_mode).toBe("thinning");
  });

  it("a channel marked again while a run visits it keeps its new mark", async () => {
    const ch = `public:sampled.${uniq()}`;
    const r = registry();
    await r.markActive(ch);
    const start = await r.beginRun(Date.now());
    const visit = start.channels.find((c) => c.channel === ch);
    expect(visit).toBeDefined();
    await r.markActive(ch); // new traffic after the run took the counts
    await r.finishRun([{ channel: ch, generation: visit?.generation ?? 0, throttled: false }]);
    expect((await r.snapshot()).active).toContain(ch);
  });

  it("a channel idle through earlier runs starts its next period at the last run, not long before", async () => {
    const ch = `public:sampled.${uniq()}`;
    const token = await publisher("public:sampled.*", "10000/s");
    // A channel whose last period began an hour ago and that has been quiet since (not marked).
    await runInDurableObject(stubOf(ch), (instance) => {
      rememberChannel(instance, ch);
      setCounters(instance, { period_started_at: Date.now() - 3_600_000 });
    });
    await cron(); // a run for other channels; this one is not marked, so it is not visited
    const lastRun = (await registry().snapshot()).lastRunAt ?? 0;
    await publishMany(ch, token, 1); // first traffic since: reports itself and learns the last run
    const started = await runInDurableObject(stubOf(ch), (instance) => counter(instance, "period_started_at"));
    expect(started).toBe(lastRun);
  });
});
