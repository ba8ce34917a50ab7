/**
 * The Pusher door's configuration (docs/operations.md, "The Pusher door"): open with id, key and
 * secret, closed with none, bad configuration in between or with a bad value; `{"by":"group"}`
 * cannot shard pusher: names.
 */
import { describe, expect, it } from "vitest";
import { ConfigError, parseConfig as parseAll, type RawConfig } from "../../src/settings/settings";
import { adminHeaders, callAndWait, envWith } from "../support/helpers";

const NO_BUDGETS: RawConfig = { PUBLISH_RATE: "", SUBSCRIBE_RATE: "", TOKEN_ISSUE_RATE: "", READ_RATE: "" };
const parseConfig = (raw: RawConfig) => parseAll({ ...NO_BUDGETS, ...raw });
const OPEN: RawConfig = { PUSHER_APP_ID: "app-1", PUSHER_APP_KEY: "key_1", PUSHER_APP_SECRET: "s".repeat(16) };

function configError(raw: RawConfig): ConfigError {
  try {
    parseConfig(raw);
  } catch (e) {
    if (e instanceof ConfigError) return e;
    throw e;
  }
  throw new Error("parsed");
}

describe("the Pusher door's settings", () => {
  it("closed when none of id, key and secret is set (empty counts as not set); defaults 10/s and 120 s", () => {
    for (const raw of [{}, { PUSHER_APP_ID: "", PUSHER_APP_KEY: " ", PUSHER_APP_SECRET: "" }]) {
      const p = parseConfig(raw).pusher;
      expect(p.app).toBeNull();
      expect(p.clientEvents).toEqual({ rate: 10, perMs: 1000, burst: 10 });
      expect(p.activityTimeoutS).toBe(120);
    }
  });

  it("open when all three are set", () => {
    expect(parseConfig(OPEN).pusher.app).toEqual({ id: "app-1", key: "key_1", secret: "s".repeat(16) });
  });

  it.each([
    [{ PUSHER_APP_ID: "a" }, "PUSHER_APP_KEY"],
    [{ PUSHER_APP_KEY: "k" }, "PUSHER_APP_ID"],
    [{ PUSHER_APP_SECRET: "s".repeat(16) }, "PUSHER_APP_ID"],
    [{ PUSHER_APP_ID: "a", PUSHER_APP_KEY: "k" }, "PUSHER_APP_SECRET"],
    [{ ...OPEN, PUSHER_APP_ID: "" }, "PUSHER_APP_ID"],
  ])("half set (%j) is bad configuration naming %s", (raw, variable) => {
    const e = configError(raw as RawConfig);
    expect(e.variable).toBe(variable);
    expect(e.message).toContain("all set (or none");
  });

  it.each([
    [{ ...OPEN, PUSHER_APP_ID: "has space" }, "PUSHER_APP_ID"],
    [{ ...OPEN, PUSHER_APP_KEY: "k".repeat(65) }, "PUSHER_APP_KEY"],
    [{ ...OPEN, PUSHER_APP_SECRET: "short" }, "PUSHER_APP_SECRET"],
    [{ PUSHER_CLIENT_EVENTS_RATE: "ten" }, "PUSHER_CLIENT_EVENTS_RATE"],
    [{ PUSHER_ACTIVITY_TIMEOUT: "5" }, "PUSHER_ACTIVITY_TIMEOUT"],
    [{ PUSHER_ACTIVITY_TIMEOUT: "2m" }, "PUSHER_ACTIVITY_TIMEOUT"],
  ])("a bad value (%j) is bad configuration naming %s", (raw, variable) => {
    expect(configError(raw as RawConfig).variable).toBe(variable);
  });

  it("a weak secret's message never says how long it is", () => {
    const e = configError({ ...OPEN, PUSHER_APP_SECRET: "abcdefgh" });
    expect(e.message).toContain("at least 16 characters");
    expect(e.message).not.toMatch(/\b8\b/);
  });

  it("an empty PUSHER_CLIENT_EVENTS_RATE takes no budget; a rate sets one", () => {
    expect(parseConfig({ PUSHER_CLIENT_EVENTS_RATE: "" }).pusher.clientEvents).toBeNull();
    expect(parseConfig({ PUSHER_CLIENT_EVENTS_RATE: "3/2s" }).pusher.clientEvents).toEqual({
      rate: 3,
      perMs: 2000,
      burst: 3,
    });
  });

  it('AUDIENCE_SHARDS: {"by":"group"} cannot match pusher: names; by continent can', () => {
    expect(configError({ AUDIENCE_SHARDS: JSON.stringify({ "pusher:**": { by: "group" } }) }).variable).toBe(
      "AUDIENCE_SHARDS",
    );
    expect(() =>
      parseConfig({ AUDIENCE_SHARDS: JSON.stringify({ "pusher:live.*": { by: "continent" } }) }),
    ).not.toThrow();
  });

  it("a half-set door fails every route closed with 500 naming the variable", async () => {
    const env = envWith({ PUSHER_APP_SECRET: "" });
    for (const path of ["/healthz", "/v1/manifest", "/v1/history/public:a.b"]) {
      const res = await callAndWait(path, { headers: adminHeaders() }, env);
      expect(res.status, path).toBe(500);
      const body = (await res.json()) as { meta: { variable?: string } };
      expect(body.meta.variable).toBe("PUSHER_APP_SECRET");
    }
  });
});

describe("the manifest's pusher member", () => {
  it("shows the door, its app id, key and client-event rate, never its secret", async () => {
    const res = await callAndWait("/v1/manifest");
    const text = await res.text();
    expect(JSON.parse(text).pusher).toEqual({
      enabled: true,
      app_id: "test-app",
      key: "test-key",
      client_events_rate: { rate: 10, per: "1s", burst: 10 },
      activity_timeout: 120,
    });
    expect(text).not.toContain("test-pusher-secret");
  });

  it("closed: enabled false, no id or key", async () => {
    const env = envWith({ PUSHER_APP_ID: "", PUSHER_APP_KEY: "", PUSHER_APP_SECRET: "" });
    const body = (await (await callAndWait("/v1/manifest", {}, env)).json()) as { pusher: unknown };
    expect(body.pusher).toMatchObject({ enabled: false, app_id: null, key: null });
  });
});
