/**
 * The admin routes the dashboard uses: the list of recently active channels, and targets set at
 * runtime (which the sampler then follows, ahead of THROTTLE_TARGET(S)).
 */
import {
  createExecutionContext,
  createScheduledController,
  runInDurableObject,
  waitOnExecutionContext,
} from "cloudflare:test";
import { env } from "cloudflare:workers";
import { describe, expect, it } from "vitest";
import { rateKey } from "../functions/before-publish";
import { samplerRegistry } from "../src/active-channels";
import worker from "../src/index";
import { adminHeaders, callAndWait, envWith, mint, openSocket, publishAndWait, uniq } from "./helpers";

async function cron(): Promise<void> {
  const ctx = createExecutionContext();
  await worker.scheduled(createScheduledController({ scheduledTime: Date.now(), cron: "* * * * *" }), env, ctx);
  await waitOnExecutionContext(ctx);
}

const admin = (path: string, init: RequestInit = {}) => callAndWait(path, { ...init, headers: adminHeaders() });

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
    const registry = samplerRegistry(env);
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
    await runInDurableObject(env.CHANNEL.get(env.CHANNEL.idFromName(ch)), (instance) => {
      (instance as unknown as { set(v: Record<string, number>): void }).set({ period_started_at: Date.now() - 1000 });
    });
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
  });
});
