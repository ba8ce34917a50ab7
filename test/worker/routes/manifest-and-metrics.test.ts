/** The public manifest and Prometheus metrics. */
import { describe, expect, it } from "vitest";
import { MetricsBuffer } from "../../../src/metrics/metrics-buffer";
import { signToken } from "../../../src/worker/auth/tokens";
import { adminHeaders, callAndWait, envWith, SLOW_TEST_MS, uniq } from "../../support/helpers";

describe("manifest", () => {
  it("shows enabled budgets with canonical windows, and no per-channel lists when empty", async () => {
    const e = envWith({
      PUBLISH_RATE: "90/1m30s",
      PUBLISH_BURST: "120",
      SUBSCRIBE_RATE: "10/s",
      SUBSCRIBE_BURST: "",
      TOKEN_ISSUE_RATE: "5/1500ms",
      READ_RATE: "30/2s",
    });
    const res = await callAndWait("/v1/manifest", {}, e);
    expect(res.status).toBe(200);
    const m = (await res.json()) as { rate_limits: Record<string, unknown>; throttle: Record<string, unknown> };
    expect(m.rate_limits).toEqual({
      publish: { rate: 90, per: "1m30s", burst: 120 },
      subscribe: { rate: 10, per: "1s", burst: 10 },
      token_issue: { rate: 5, per: "1.5s", burst: 30 },
      read: { rate: 30, per: "2s", burst: 40 },
      admin_auth: { rate: 10, per: "1m", burst: 20 },
    });
    expect(m.throttle).toMatchObject({ analytics_channel: "private:floodgate.analytics.dropped", fallback_rate: 0 });
    // This suite's SAMPLER_FAST_PERIOD (test/vitest.config.ts), in canonical form.
    expect(m.throttle.fast_period).toBe("10m");
  });

  it("always lists audience_shards: [] with the shipped AUDIENCE_SHARDS (no rule)", async () => {
    const res = await callAndWait("/v1/manifest", {}, envWith({ AUDIENCE_SHARDS: "{}" }));
    expect(res.status).toBe(200);
    expect(((await res.json()) as { audience_shards?: unknown }).audience_shards).toEqual([]);
  });

  it("shows a disabled budget as rate 0, per 0s, burst 0", async () => {
    const res = await callAndWait("/v1/manifest", {}, envWith({ SUBSCRIBE_RATE: "", PUBLISH_RATE: "0/s" }));
    const m = (await res.json()) as { rate_limits: Record<string, unknown> };
    expect(m.rate_limits.subscribe).toEqual({ rate: 0, per: "0s", burst: 0 });
    expect(m.rate_limits.publish).toEqual({ rate: 0, per: "0s", burst: 0 });
  });

  it("lists per-channel budgets most specific first, and never per-token overrides", async () => {
    const e = envWith({
      PER_CHANNEL_PUBLISH_LIMITS: JSON.stringify({
        "public:**": "5/s",
        "public:live.reactions": { rate: 500, per: "1s", burst: 800 },
        "public:live.*": "0/s",
      }),
      PER_CHANNEL_SUBSCRIBE_LIMITS: JSON.stringify({ "private:team.*.chat": "2/m" }),
    });
    const m = (await (await callAndWait("/v1/manifest", {}, e)).json()) as { rate_limits: Record<string, unknown> };
    expect(m.rate_limits.per_channel_publish).toEqual([
      { pattern: "public:live.reactions", limit: { rate: 500, per: "1s", burst: 800 } },
      { pattern: "public:live.*", limit: { rate: 0, per: "0s", burst: 0 } },
      { pattern: "public:**", limit: { rate: 5, per: "1s", burst: 5 } },
    ]);
    expect(m.rate_limits.per_channel_subscribe).toEqual([
      { pattern: "private:team.*.chat", limit: { rate: 2, per: "1m", burst: 2 } },
    ]);
    expect(JSON.stringify(m)).not.toContain("rl");
  });
});

describe("metrics", () => {
  function value(text: string, series: string): number {
    const line = text.split("\n").find((l) => l.startsWith(`${series} `));
    return Number(line?.split(" ")[1] ?? Number.NaN);
  }

  it("counts every decision made before the scrape, by bucket and result", { timeout: SLOW_TEST_MS }, async () => {
    // The drop rate cached for a minute: the publishes' KV reads below do not depend on how long they take.
    const e = envWith({
      PUBLISH_RATE: "2/h",
      PUBLISH_BURST: "",
      METRICS_FLUSH_MS: "1000",
      THROTTLE_RATE_CACHE_MS: "60000",
    });
    const scrape = async () => (await callAndWait("/metrics", { headers: adminHeaders() }, e)).text();
    const before = await scrape();
    const now = Math.floor(Date.now() / 1000);
    const t = await signToken(
      { sub: uniq(), typ: "access", chs: ["public:m.*"], scp: ["publish"], iat: now, exp: now + 60, jti: "j" },
      "test-token-secret-0123456789abcdef",
    );
    const statuses = [];
    for (let i = 0; i < 5; i++) {
      const res = await callAndWait(
        `/v1/publish/public:m.${uniq()}`,
        { method: "POST", headers: { authorization: `Bearer ${t}` }, body: "1" },
        e,
      );
      statuses.push(res.status);
    }
    expect(statuses).toEqual([200, 200, 429, 429, 429]);
    const after = await scrape();
    expect(after).toContain("# TYPE floodgate_rate_limit_decisions_total counter");
    const d = (s: string) => value(after, s) - value(before, s);
    expect(d('floodgate_rate_limit_decisions_total{bucket="publish",result="allowed"}')).toBe(2);
    expect(d('floodgate_rate_limit_decisions_total{bucket="publish",result="denied"}')).toBe(3);
    expect(d('floodgate_messages_total{result="delivered"}')).toBe(2);
    expect(d('floodgate_messages_total{result="dropped"}')).toBe(0);
    // Object calls: one limiter call for each of the first three (the 3rd was denied by the object),
    // none for the two denied from the deny cache, and the second scrape's two admin-auth calls (its
    // charge before its bearer is compared, and the refund once it was right: both are made before
    // the scrape reads the counters); one channel call per delivered publish. The two that
    // got through read their channel's key each, and the global key once between them (it is cached
    // for all channels); denials never reach the throttle.
    expect(d('floodgate_object_calls_total{object="limiter"}')).toBe(5);
    expect(d('floodgate_object_calls_total{object="channel"}')).toBe(2);
    expect(d('floodgate_object_calls_total{object="analytics"}')).toBe(0);
    expect(d("floodgate_kv_reads_total")).toBe(3);
  });

  it("batches: many events in one isolate make one store call per flush interval", async () => {
    let calls = 0;
    const added: Record<string, number>[] = [];
    const buffer = new MetricsBuffer(
      () => ({
        add: (d: Record<string, number>) => {
          calls++;
          added.push(d);
        },
      }),
      1000,
    );
    const deferred: Promise<unknown>[] = [];
    for (let i = 0; i < 500; i++) {
      buffer.inc("floodgate_messages_total", { result: "delivered" });
      buffer.schedule((p) => deferred.push(p));
    }
    expect(deferred).toHaveLength(1);
    await Promise.all(deferred);
    expect(calls).toBe(1);
    expect(added[0]).toEqual({ 'floodgate_messages_total{result="delivered"}': 500 });
  });

  it("a failed flush puts its counts back, and the next flush carries them with the new ones", async () => {
    const added: Record<string, number>[] = [];
    let failNext = true;
    const buffer = new MetricsBuffer(
      () => ({
        add: async (d: Record<string, number>) => {
          if (failNext) {
            failNext = false;
            throw new Error("metrics object down");
          }
          added.push(d);
        },
      }),
      0,
    );
    buffer.inc("floodgate_messages_total", { result: "delivered" }, 3);
    buffer.inc("floodgate_kv_reads_total");
    await buffer.flushNow(); // fails: nothing stored, nothing lost
    expect(added).toEqual([]);
    buffer.inc("floodgate_messages_total", { result: "delivered" }, 2);
    await buffer.flushNow();
    expect(added).toEqual([{ 'floodgate_messages_total{result="delivered"}': 5, floodgate_kv_reads_total: 1 }]);
    await buffer.flushNow(); // nothing pending: no empty call
    expect(added).toHaveLength(1);
  });
});
