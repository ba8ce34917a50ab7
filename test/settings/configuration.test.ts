/** Configuration: parsing rules and fail-closed behaviour on every route. */
import { describe, expect, it } from "vitest";
import {
  ConfigError,
  parseConfig as parseAll,
  type RawConfig,
  REQUIRED_BUDGETS,
  rawConfigFrom,
} from "../../src/settings/settings";
import { adminHeaders, callAndWait, envWith } from "../support/helpers";

/** The budgets every configuration must state, disabled, so each test states only what it checks. */
const NO_BUDGETS: RawConfig = { PUBLISH_RATE: "", SUBSCRIBE_RATE: "", TOKEN_ISSUE_RATE: "", READ_RATE: "" };

const parseConfig = (raw: RawConfig) => parseAll({ ...NO_BUDGETS, ...raw });

describe("parseConfig", () => {
  it("parses the shipped wrangler.toml values", async () => {
    const { env } = await import("cloudflare:workers");
    const c = parseConfig(rawConfigFrom(env));
    expect(c.publish).toEqual({ rate: 50, perMs: 1000, burst: 100 });
    expect(c.analyticsChannel.name).toBe("private:floodgate.analytics.dropped");
    expect(c.maxMessageBytes).toBe(32768);
    expect(c.historyLimit).toBe(100);
    expect(c.throttleFallbackRate).toBe(0);
    expect(c.read).toEqual({ rate: 20, perMs: 1000, burst: 40 });
    expect(c.sessionTtlSeconds).toBe(30 * 86400);
  });

  it("applies the API's defaults when variables are absent", () => {
    const c = parseConfig({});
    expect(c.publish).toBeNull();
    expect(c.adminAuth).toEqual({ rate: 10, perMs: 60_000, burst: 20 });
    expect(c.analyticsChannel.name).toBe("private:floodgate.analytics.dropped");
    expect(c.maxMessageBytes).toBe(32768);
    expect(c.historyLimit).toBe(100);
    expect(c.perChannelPublish).toEqual([]);
    expect(c.throttleTarget).toBeNull();
    expect(c.read).toBeNull();
    expect(c.sessionTtlSeconds).toBe(30 * 86400);
  });

  it.each(REQUIRED_BUDGETS)("%s absent is bad configuration; only an explicit empty string disables it", (name) => {
    const raw: RawConfig = { ...NO_BUDGETS };
    delete raw[name];
    let err: unknown;
    try {
      parseAll(raw);
    } catch (e) {
      err = e;
    }
    expect(err).toBeInstanceOf(ConfigError);
    expect((err as ConfigError).variable).toBe(name);
    expect((err as ConfigError).message).toContain(`${name}: is not set`);
    expect(() => parseAll({ ...NO_BUDGETS })).not.toThrow();
  });

  it("ADMIN_AUTH_RATE and ADMIN_AUTH_BURST: 10/m and 20 when absent, empty disables, bad fails closed", () => {
    expect(parseConfig({ ADMIN_AUTH_RATE: "5/s", ADMIN_AUTH_BURST: "7" }).adminAuth).toEqual({
      rate: 5,
      perMs: 1000,
      burst: 7,
    });
    expect(parseConfig({ ADMIN_AUTH_RATE: "" }).adminAuth).toBeNull();
    for (const [name, value] of [
      ["ADMIN_AUTH_RATE", "10/fortnight"],
      ["ADMIN_AUTH_BURST", "lots"],
    ] as const) {
      expect(() => parseConfig({ [name]: value })).toThrow(name);
    }
  });

  it("HISTORY_TTL and SAMPLER_MAX_CHANNELS: shipped 7d and 500; bad values fail closed naming the variable", () => {
    expect(parseConfig({})).toMatchObject({ historyTtlMs: 7 * 86_400_000, samplerMaxChannels: 500 });
    expect(parseConfig({ HISTORY_TTL: "12h", SAMPLER_MAX_CHANNELS: "50" })).toMatchObject({
      historyTtlMs: 12 * 3_600_000,
      samplerMaxChannels: 50,
    });
    for (const [name, value] of [
      ["HISTORY_TTL", "forever"],
      ["HISTORY_TTL", "0s"],
      ["HISTORY_TTL", "10"],
      ["SAMPLER_MAX_CHANNELS", "0"],
      ["SAMPLER_MAX_CHANNELS", "lots"],
      ["SAMPLER_MAX_CHANNELS", "1.5"],
    ] as const) {
      expect(() => parseConfig({ [name]: value }), `${name}=${value}`).toThrow(ConfigError);
      expect(() => parseConfig({ [name]: value })).toThrow(name);
    }
  });

  it("RELAY_CAPACITY and MAX_SUBSCRIBERS: 1000 and 100000; bad values fail closed naming the variable", async () => {
    const { env } = await import("cloudflare:workers");
    expect(parseConfig(rawConfigFrom(env))).toMatchObject({ relayCapacity: 1000, maxSubscribers: 100_000 });
    expect(parseConfig({})).toMatchObject({ relayCapacity: 1000, maxSubscribers: 100_000 });
    expect(parseConfig({ RELAY_CAPACITY: "32768", MAX_SUBSCRIBERS: "5" })).toMatchObject({
      relayCapacity: 32_768,
      maxSubscribers: 5,
    });
    for (const [name, value] of [
      ["RELAY_CAPACITY", "0"],
      ["RELAY_CAPACITY", "32769"],
      ["RELAY_CAPACITY", "many"],
      ["MAX_SUBSCRIBERS", "0"],
      ["MAX_SUBSCRIBERS", "-1"],
      ["MAX_SUBSCRIBERS", "1e6"],
    ] as const) {
      expect(() => parseConfig({ [name]: value }), `${name}=${value}`).toThrow(ConfigError);
      expect(() => parseConfig({ [name]: value })).toThrow(name);
    }
  });

  it("raises a burst below the rate, and treats empty or 0 burst as the rate", () => {
    expect(parseConfig({ PUBLISH_RATE: "50/s", PUBLISH_BURST: "10" }).publish?.burst).toBe(50);
    expect(parseConfig({ PUBLISH_RATE: "50/s", PUBLISH_BURST: "0" }).publish?.burst).toBe(50);
    expect(parseConfig({ PUBLISH_RATE: "50/s", PUBLISH_BURST: "" }).publish?.burst).toBe(50);
  });

  it("orders per-channel rules most specific first and accepts both limit forms", () => {
    const c = parseConfig({
      PER_CHANNEL_PUBLISH_LIMITS: JSON.stringify({
        "public:**": "5/s",
        "public:live.*": { rate: 500, per: "1s", burst: 800 },
      }),
    });
    expect(c.perChannelPublish.map((r) => [r.pattern.source, r.value])).toEqual([
      ["public:live.*", { rate: 500, perMs: 1000, burst: 800 }],
      ["public:**", { rate: 5, perMs: 1000, burst: 5 }],
    ]);
  });

  it.each([
    ["PUBLISH_RATE", "abc"],
    ["PUBLISH_RATE", "10/wat"],
    ["PUBLISH_BURST", "lots"],
    ["SUBSCRIBE_RATE", "1.5/s"],
    ["TOKEN_ISSUE_RATE", "10/0s"],
    ["PER_CHANNEL_PUBLISH_LIMITS", "{not json"],
    ["PER_CHANNEL_PUBLISH_LIMITS", '["public:a.b"]'],
    ["PER_CHANNEL_PUBLISH_LIMITS", '{"public:a.**.b":"5/s"}'],
    ["PER_CHANNEL_SUBSCRIBE_LIMITS", '{"public:a.b":"5/x"}'],
    ["THROTTLE_FALLBACK_RATE", "lots"],
    ["THROTTLE_FALLBACK_RATE", "1.5"],
    ["THROTTLE_TARGET", "fast"],
    ["THROTTLE_TARGETS", '{"public:a.*":{"deliveries":"x"}}'],
    ["ANALYTICS_CHANNEL", "analytics"],
    ["ANALYTICS_CHANNEL", "public:floodgate.dropped"],
    ["READ_RATE", "20/fortnight"],
    ["READ_BURST", "many"],
    ["SESSION_TTL", "30 days"],
    ["SESSION_TTL", "0s"],
    ["MAX_MESSAGE_BYTES", "-1"],
    ["HISTORY_LIMIT", "0"],
    ["THROTTLE_RATE_CACHE_MS", "soon"],
    ["SAMPLER_FAST_PERIOD", "5"],
    ["SAMPLER_FAST_PERIOD", "fast"],
    ["SAMPLER_FAST_PERIOD", "500ms"],
    ["SAMPLER_FAST_PERIOD", "0s"],
  ])("rejects %s=%j naming the variable", (variable, value) => {
    let err: unknown;
    try {
      parseConfig({ [variable]: value });
    } catch (e) {
      err = e;
    }
    expect(err).toBeInstanceOf(ConfigError);
    expect((err as ConfigError).variable).toBe(variable);
    expect((err as ConfigError).message).toContain(variable);
  });
});

describe("SAMPLER_FAST_PERIOD", () => {
  it("is a duration of at least 1s, 5s when unset", () => {
    expect(parseConfig({}).samplerFastPeriodMs).toBe(5000);
    expect(parseConfig({ SAMPLER_FAST_PERIOD: " " }).samplerFastPeriodMs).toBe(5000);
    expect(parseConfig({ SAMPLER_FAST_PERIOD: "1s" }).samplerFastPeriodMs).toBe(1000);
    expect(parseConfig({ SAMPLER_FAST_PERIOD: "2.5s" }).samplerFastPeriodMs).toBe(2500);
    expect(parseConfig({ SAMPLER_FAST_PERIOD: "1m" }).samplerFastPeriodMs).toBe(60_000);
  });
});

describe("fail closed", () => {
  it.each([
    ["/healthz", "GET"],
    ["/v1/manifest", "GET"],
    ["/v1/publish/public:a.b", "POST"],
    ["/v1/tokens", "POST"],
    ["/v1/subscribe/public:a.b", "GET"],
    ["/v1/admin/throttle/*", "GET"],
    ["/metrics", "GET"],
  ])("%s answers 500 naming the variable when PUBLISH_RATE is missing", async (path, method) => {
    const bad = envWith({ PUBLISH_RATE: undefined });
    const res = await callAndWait(path, { method, headers: adminHeaders() }, bad);
    expect(res.status).toBe(500);
    expect(await res.json()).toMatchObject({
      code: "internal",
      msg: expect.stringContaining("PUBLISH_RATE"),
      meta: { variable: "PUBLISH_RATE" },
    });
  });

  it.each([
    ["/healthz", "GET"],
    ["/v1/manifest", "GET"],
    ["/v1/publish/public:a.b", "POST"],
    ["/v1/tokens", "POST"],
    ["/v1/subscribe/public:a.b", "GET"],
    ["/v1/admin/throttle/*", "GET"],
    ["/metrics", "GET"],
  ])("%s answers 500 naming the variable when PER_CHANNEL_PUBLISH_LIMITS is bad", async (path, method) => {
    const bad = envWith({ PER_CHANNEL_PUBLISH_LIMITS: '{"public:live.*": "500/wat"}' });
    const res = await callAndWait(path, { method, headers: adminHeaders() }, bad);
    expect(res.status).toBe(500);
    const body = (await res.json()) as { code: string; msg: string; meta: Record<string, string> };
    expect(body.code).toBe("internal");
    expect(body.meta.code).toBe("INTERNAL");
    expect(body.msg).toContain("PER_CHANNEL_PUBLISH_LIMITS");
    expect(body.meta.variable).toBe("PER_CHANNEL_PUBLISH_LIMITS");
    expect(JSON.stringify(body)).not.toMatch(/at .*\.ts|stack/i);
  });
});
