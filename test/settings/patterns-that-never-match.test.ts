/**
 * A configured channel pattern no channel name can match (`public:live` for `public:live.*`,
 * `private:team.*` where private names have three components) would be a rule that never applies:
 * it is bad configuration, refused naming the variable and the pattern with the reason minting a
 * token gives for the same pattern (docs/operations.md, Configuration).
 */
import { describe, expect, it } from "vitest";
import { ConfigError, parseConfig, type RawConfig } from "../../src/settings/settings";
import { parsePattern, whyNeverMatches } from "../../src/wire/channel-names";

/** The budgets every configuration must state, disabled, so each test states only what it checks. */
const NO_BUDGETS: RawConfig = { PUBLISH_RATE: "", SUBSCRIBE_RATE: "", TOKEN_ISSUE_RATE: "", READ_RATE: "" };

const LONG = `public:${"a".repeat(64)}.${"b".repeat(64)}.${"c".repeat(64)}.*`;

/** The ConfigError parsing `raw` throws (or undefined). */
function configErrorOf(raw: RawConfig): ConfigError | undefined {
  try {
    parseConfig({ ...NO_BUDGETS, ...raw });
  } catch (e) {
    if (e instanceof ConfigError) return e;
    throw e;
  }
  return undefined;
}

describe("a configured pattern no channel can match", () => {
  it.each([
    ["PER_CHANNEL_PUBLISH_LIMITS", "public:live", "5/s", "public channels have 2 to 4 components"],
    ["PER_CHANNEL_SUBSCRIBE_LIMITS", "private:team.*", "5/s", "private channels have 3 to 4 components"],
    ["THROTTLE_TARGETS", "public:a.b.c.d.e", "10/s", "exactly 5"],
    ["THROTTLE_SUMMARY", "public:a.b.c.d.**", "/emoji", "5 or more"],
    ["CONFLATE_KEYS", "public:*", "/match", "exactly 1"],
    ["AUDIENCE_SHARDS", "private:team", { by: "group" }, "private channels have 3 to 4 components"],
    ["THROTTLE_TARGETS", LONG, "10/s", "longer than 200 characters"],
  ] as const)("%s: %s is a ConfigError naming the variable and the pattern", (variable, pattern, value, why) => {
    // Beside a good rule, so it is the bad pattern, not the variable, that is refused.
    const good = variable.startsWith("PER_CHANNEL") || variable === "THROTTLE_TARGETS" ? "5/s" : value;
    const err = configErrorOf({ [variable]: JSON.stringify({ "public:ok.*": good, [pattern]: value }) });
    expect(err).toBeInstanceOf(ConfigError);
    expect(err?.variable).toBe(variable);
    expect(err?.message).toContain(`${variable}: ${pattern}: `);
    expect(err?.message).toContain(why);
    // The same reason minting a token with this pattern gives (src/worker/routes/tokens.ts).
    expect(err?.message).toContain(String(whyNeverMatches(parsePattern(pattern))));
  });

  it("a pattern the grammar refuses is named too", () => {
    const err = configErrorOf({ CONFLATE_KEYS: JSON.stringify({ "public:a.**.b": "/match" }) });
    expect(err?.message).toBe(
      'invalid configuration: CONFLATE_KEYS: public:a.**.b: "**" may only be the last segment of a pattern',
    );
  });

  it("THROTTLE_THINNING: a pattern in the list that never matches is refused naming it", () => {
    const err = configErrorOf({ THROTTLE_THINNING: "public:live.*, private:team.*" });
    expect(err).toBeInstanceOf(ConfigError);
    expect(err?.variable).toBe("THROTTLE_THINNING");
    expect(err?.message).toContain("THROTTLE_THINNING: private:team.*: private channels have 3 to 4 components");
  });

  it("accepts patterns some channel matches, in every variable", () => {
    const c = parseConfig({
      ...NO_BUDGETS,
      PER_CHANNEL_PUBLISH_LIMITS: JSON.stringify({ "public:live.*": "5/s", "public:**": "9/s" }),
      PER_CHANNEL_SUBSCRIBE_LIMITS: JSON.stringify({ "private:team.**": "5/s", "private:team.*.*": "5/s" }),
      THROTTLE_TARGETS: JSON.stringify({ "public:a.b.c.**": "10/s", "pusher:*": "10/s" }),
      THROTTLE_SUMMARY: JSON.stringify({ "public:*.*": "/emoji" }),
      CONFLATE_KEYS: JSON.stringify({ "pusher:presence-room.**": "/match" }),
      AUDIENCE_SHARDS: JSON.stringify({ "private:team.*.*": { by: "group" } }),
      THROTTLE_THINNING: "public:live.*,private:team.**",
    });
    expect(c.perChannelPublish).toHaveLength(2);
    expect(c.perChannelSubscribe).toHaveLength(2);
    expect(c.throttleTargets).toHaveLength(2);
    expect(c.throttleSummary).toHaveLength(1);
    expect(c.conflateKeys).toHaveLength(1);
    expect(c.audienceShards).toHaveLength(1);
    expect(c.throttleThinning.map((p) => p.source)).toEqual(["public:live.*", "private:team.**"]);
  });
});
