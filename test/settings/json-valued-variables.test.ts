/**
 * JSON-valued variables written as TOML tables: wrangler hands such a variable to the Worker as an
 * object, not a string. It must parse exactly like its JSON-string form, and a bad one must fail
 * closed naming the variable, never count as absent (docs/operations.md, Configuration).
 */
import { env } from "cloudflare:workers";
import { describe, expect, it } from "vitest";
import { ConfigError, parseConfig, type RawConfig, rawConfigFrom } from "../../src/settings/settings";
import { callAndWait, envWith } from "../support/helpers";

/** The budgets every configuration must state, disabled, so each test states only what it checks. */
const NO_BUDGETS: RawConfig = { PUBLISH_RATE: "", SUBSCRIBE_RATE: "", TOKEN_ISSUE_RATE: "", READ_RATE: "" };

/** The settings an env holding `vars` (values as wrangler passes them: strings, numbers, objects) gives. */
const settingsWith = (vars: Record<string, unknown>) => parseConfig(rawConfigFrom({ ...NO_BUDGETS, ...vars }));

/** The ConfigError `run` throws (or undefined). */
function configErrorOf(run: () => unknown): ConfigError | undefined {
  try {
    run();
  } catch (e) {
    if (e instanceof ConfigError) return e;
    throw e;
  }
  return undefined;
}

describe("a JSON-valued variable written as a TOML table", () => {
  it("PER_CHANNEL_PUBLISH_LIMITS as an object gives the rule its JSON string gives", () => {
    const table = settingsWith({ PER_CHANNEL_PUBLISH_LIMITS: { "public:live.*": "500/s" } });
    expect(table.perChannelPublish.map((r) => [r.pattern.source, r.value])).toEqual([
      ["public:live.*", { rate: 500, perMs: 1000, burst: 500 }],
    ]);
    const text = settingsWith({ PER_CHANNEL_PUBLISH_LIMITS: '{"public:live.*":"500/s"}' });
    expect(table.perChannelPublish).toEqual(text.perChannelPublish);
  });

  it("every JSON-valued variable reads its object form (nested objects too)", () => {
    const c = settingsWith({
      PER_CHANNEL_SUBSCRIBE_LIMITS: { "public:live.*": { rate: 5, per: "1s", burst: 9 } },
      THROTTLE_TARGETS: { "public:live.*": { deliveries: "5000/s" }, "public:news.*": "10/s" },
      THROTTLE_SUMMARY: { "public:live.**": "/emoji" },
      CONFLATE_KEYS: { "public:live.*": "/match" },
      AUDIENCE_SHARDS: { "public:stadium.*": { by: "continent" } },
    });
    expect(c.perChannelSubscribe.map((r) => r.value)).toEqual([{ rate: 5, perMs: 1000, burst: 9 }]);
    expect(c.throttleTargets.map((r) => [r.pattern.source, r.value?.kind, r.value?.perSecond])).toEqual([
      ["public:live.*", "deliveries", 5000],
      ["public:news.*", "messages", 10],
    ]);
    expect(c.throttleSummary.map((r) => [r.pattern.source, r.value.pointer])).toEqual([["public:live.**", "/emoji"]]);
    expect(c.conflateKeys.map((r) => [r.pattern.source, r.value.pointer])).toEqual([["public:live.*", "/match"]]);
    expect(c.audienceShards.map((r) => [r.pattern.source, r.value])).toEqual([
      ["public:stadium.*", { by: "continent" }],
    ]);
  });

  it.each([
    ["PER_CHANNEL_PUBLISH_LIMITS", { "public:live.*": "zzz" }],
    ["PER_CHANNEL_SUBSCRIBE_LIMITS", { "public:live.*": { rate: "many" } }],
    ["THROTTLE_TARGETS", { "public:live.*": "zzz" }],
    ["THROTTLE_SUMMARY", { "public:live.*": 5 }],
    ["CONFLATE_KEYS", { "public:live.*": "no-slash" }],
    ["AUDIENCE_SHARDS", { "public:live.*": { by: "mood" } }],
    ["PER_CHANNEL_PUBLISH_LIMITS", { "public:a.**.b": "5/s" }],
    // An array is read as its JSON text too, which only CORS_ORIGINS takes: refused, not ignored.
    ["PER_CHANNEL_PUBLISH_LIMITS", ["public:live.*"]],
    ["CORS_ORIGINS", ["https://app.example/"]],
    ["CORS_ORIGINS", ["https://app.example", 5]],
    ["CORS_ORIGINS", [["https://app.example"]]],
    // A table where a plain value belongs (THROTTLE_TARGET is shorthand only).
    ["THROTTLE_TARGET", { deliveries: "5000/s" }],
    ["HISTORY_LIMIT", { n: 10 }],
  ])("a bad %s written as %j is a ConfigError naming the variable", (variable, value) => {
    const err = configErrorOf(() => settingsWith({ [variable]: value }));
    expect(err).toBeInstanceOf(ConfigError);
    expect(err?.variable).toBe(variable);
    expect(err?.message).toContain(variable);
  });

  it("CORS_ORIGINS as a TOML array of origins gives the list its comma-separated text gives", () => {
    const array = settingsWith({ CORS_ORIGINS: ["https://app.example", "http://localhost:5173", "*"] });
    const text = settingsWith({ CORS_ORIGINS: "https://app.example, http://localhost:5173, *" });
    expect([...array.cors.origins]).toEqual(["https://app.example", "http://localhost:5173"]);
    expect(array.cors.anyForPublicReads).toBe(true);
    expect(array.cors).toEqual(text.cors);
    expect(settingsWith({ CORS_ORIGINS: [] }).cors.origins.size).toBe(0);
  });

  it("a value of any other type (null, a binding, a bigint) is a ConfigError naming the variable", () => {
    for (const value of [null, env.THROTTLE_KV, 10n, () => "{}"]) {
      const err = configErrorOf(() => rawConfigFrom({ ...NO_BUDGETS, THROTTLE_TARGETS: value }));
      expect(err).toBeInstanceOf(ConfigError);
      expect(err?.variable).toBe("THROTTLE_TARGETS");
    }
  });

  it("numbers and booleans still read as their text; absent ones stay absent", () => {
    const raw = rawConfigFrom({ ...NO_BUDGETS, HISTORY_LIMIT: 50, THROTTLE_FALLBACK_RATE: 0, OTHER: { a: 1 } });
    expect(raw).toEqual({ ...NO_BUDGETS, HISTORY_LIMIT: "50", THROTTLE_FALLBACK_RATE: "0" });
  });
});

describe("the Worker with a table-valued variable", () => {
  it("applies a good one: the manifest lists the rule", async () => {
    const res = await callAndWait(
      "/v1/manifest",
      {},
      envWith({ PER_CHANNEL_PUBLISH_LIMITS: { "public:live.*": "500/s" } }),
    );
    expect(res.status).toBe(200);
    const body = (await res.json()) as { rate_limits: { per_channel_publish?: unknown } };
    expect(body.rate_limits.per_channel_publish).toEqual([
      { pattern: "public:live.*", limit: { rate: 500, per: "1s", burst: 500 } },
    ]);
  });

  it("fails closed on a bad one: 500 naming the variable", async () => {
    const res = await callAndWait("/healthz", {}, envWith({ THROTTLE_TARGETS: { "public:live.*": "zzz" } }));
    expect(res.status).toBe(500);
    expect(await res.json()).toMatchObject({ code: "internal", meta: { variable: "THROTTLE_TARGETS" } });
  });
});
