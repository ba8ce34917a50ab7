/**
 * The manifest carries every configuration variable (src/settings/variables.ts), parsed, and never a
 * secret; docs/api.md's example and the OpenAPI document show the fields the code sends.
 */
import { describe, expect, it } from "vitest";
import apiDoc from "../../../docs/api.md?raw";
import { CONFIG_VARIABLES, type ConfigVariable, parseConfig, type RawConfig } from "../../../src/settings/settings";
import { manifest } from "../../../src/worker/routes/manifest";
import { call, callAndWait, envWith } from "../../support/helpers";

const PUSHER_SECRET_VALUE = "manifest-test-pusher-secret-0123";

/** A deployment with every budget stated and the Pusher door open, every list empty. */
const BASE: RawConfig = {
  PUBLISH_RATE: "50/s",
  SUBSCRIBE_RATE: "10/s",
  TOKEN_ISSUE_RATE: "30/m",
  READ_RATE: "20/s",
  PUSHER_APP_ID: "app-1",
  PUSHER_APP_KEY: "key-1",
  PUSHER_APP_SECRET: PUSHER_SECRET_VALUE,
};

/**
 * Variables the manifest must NOT show, each with its reason. Empty: secrets (TOKEN_SECRET,
 * ADMIN_TOKEN, PUSHER_APP_SECRET) are not variables (`wrangler secret put`), so none is in
 * CONFIG_VARIABLES; a variable added later whose value must stay private goes here, never silently.
 */
const NOT_IN_MANIFEST: Partial<Record<ConfigVariable, string>> = {};

/**
 * For every other variable, a valid value unlike BASE's (or the default): setting it must change
 * the manifest. A new variable fails the first test below until it has one here — and then the
 * second until the manifest shows it.
 */
const ANOTHER_VALUE: Record<Exclude<ConfigVariable, keyof typeof NOT_IN_MANIFEST>, string> = {
  PUBLISH_RATE: "7/s",
  PUBLISH_BURST: "77",
  SUBSCRIBE_RATE: "3/s",
  SUBSCRIBE_BURST: "33",
  TOKEN_ISSUE_RATE: "4/m",
  TOKEN_ISSUE_BURST: "44",
  READ_RATE: "5/s",
  READ_BURST: "55",
  ADMIN_AUTH_RATE: "3/m",
  ADMIN_AUTH_BURST: "30",
  PER_CHANNEL_PUBLISH_LIMITS: '{"public:live.*":"500/s"}',
  PER_CHANNEL_SUBSCRIBE_LIMITS: '{"public:live.*":"5/s"}',
  THROTTLE_FALLBACK_RATE: "0.25",
  THROTTLE_TARGET: "200/s",
  THROTTLE_TARGETS: '{"public:live.*":"50/s"}',
  THROTTLE_RATE_CACHE_MS: "2500",
  THROTTLE_THINNING: "public:live.*",
  SAMPLER_FAST_PERIOD: "7s",
  METRICS_FLUSH_MS: "3000",
  ANALYTICS_CHANNEL: "private:ops.analytics.copies",
  MAX_MESSAGE_BYTES: "65536",
  HISTORY_LIMIT: "250",
  SESSION_TTL: "2d",
  ANALYTICS_RETENTION: "12h",
  RECORD_RETENTION: "10d",
  HISTORY_TTL: "3d",
  SAMPLER_MAX_CHANNELS: "50",
  RELAY_CAPACITY: "250",
  MAX_SUBSCRIBERS: "5000",
  MAX_SUBSCRIPTIONS_PER_CLIENT: "5",
  ANONYMOUS_SHARE: "0.25",
  MAX_CONNECTIONS_PER_CLIENT: "30",
  FRAME_DELAY: "50ms",
  THROTTLE_SUMMARY: '{"public:live.*":"/emoji"}',
  SUMMARY_INTERVAL: "2s",
  CONFLATE_KEYS: '{"public:scores.*":"/match"}',
  PRESENCE_ANNOUNCE_MAX: "50",
  PRESENCE_INTERVAL: "30s",
  AUDIENCE_SHARDS: '{"public:match.**":{"by":"continent"}}',
  CORS_ORIGINS: "https://app.example",
  PUSHER_APP_ID: "app-2",
  PUSHER_APP_KEY: "key-2",
  PUSHER_CLIENT_EVENTS_RATE: "3/s",
  PUSHER_ACTIVITY_TIMEOUT: "60",
};

const manifestOf = (raw: RawConfig) => manifest(parseConfig(raw));

/** Every key path of a JSON value (`a.b`, array elements as `a[]`), objects and arrays included. */
function paths(value: unknown, at = "", out = new Set<string>()): Set<string> {
  if (Array.isArray(value)) {
    for (const v of value) paths(v, `${at}[]`, out);
  } else if (value !== null && typeof value === "object") {
    for (const [k, v] of Object.entries(value)) {
      const p = at ? `${at}.${k}` : k;
      out.add(p);
      paths(v, p, out);
    }
  }
  return out;
}

/** docs/api.md's manifest example: the JSON block under "`GET /v1/manifest` →". */
function documentedExample(): unknown {
  const from = apiDoc.indexOf("- `GET /v1/manifest` →");
  expect(from).toBeGreaterThan(0);
  const block = apiDoc.slice(from).match(/```json\n([\s\S]*?)\n\s*```/);
  return JSON.parse(block?.[1] ?? "null");
}

describe("the manifest carries every variable", () => {
  it("every variable has another value here, or a stated reason to stay out", () => {
    const listed = new Set([...Object.keys(ANOTHER_VALUE), ...Object.keys(NOT_IN_MANIFEST)]);
    const missing = CONFIG_VARIABLES.filter((v) => !listed.has(v));
    expect(missing, "variables neither shown in the manifest test nor excluded").toEqual([]);
    expect([...listed].filter((v) => !(CONFIG_VARIABLES as string[]).includes(v))).toEqual([]);
  });

  it.each(CONFIG_VARIABLES.filter((v) => !(v in NOT_IN_MANIFEST)))("%s changes the manifest", (variable) => {
    const value = ANOTHER_VALUE[variable as keyof typeof ANOTHER_VALUE];
    expect(manifestOf({ ...BASE, [variable]: value })).not.toEqual(manifestOf(BASE));
  });

  it("shows the effective values: messages, sessions, sampler reach and metrics flush", () => {
    const m = manifestOf({
      ...BASE,
      MAX_MESSAGE_BYTES: "65536",
      HISTORY_LIMIT: "250",
      HISTORY_TTL: "3d",
      FRAME_DELAY: "1000ms",
      SESSION_TTL: "2d",
      SAMPLER_MAX_CHANNELS: "50",
      METRICS_FLUSH_MS: "3000",
    });
    expect(m.messages).toEqual({ max_bytes: 65536, history_limit: 250, history_ttl: "72h", frame_delay: "1s" });
    expect(m.tokens).toEqual({ session_ttl: "48h" });
    expect(m.throttle.sampler_max_channels).toBe(50);
    expect(m.metrics).toEqual({ flush_ms: 3000 });
  });

  it("shows the defaults of the variables left unset, as canonical durations", () => {
    const m = manifestOf(BASE);
    expect(m.messages).toEqual({ max_bytes: 32768, history_limit: 100, history_ttl: "168h", frame_delay: "0s" });
    expect(m.tokens).toEqual({ session_ttl: "720h" });
    expect(m.throttle.sampler_max_channels).toBe(500);
    expect(m.metrics).toEqual({ flush_ms: 1000 });
  });

  it("never shows a secret, however the door and budgets are set", async () => {
    const every = { ...BASE, ...ANOTHER_VALUE, PUSHER_APP_SECRET: PUSHER_SECRET_VALUE };
    const text = JSON.stringify(manifestOf(every));
    expect(text).not.toContain(PUSHER_SECRET_VALUE);
    expect(text).not.toMatch(/secret/i);
    // Through the route, with the suite's TOKEN_SECRET, ADMIN_TOKEN and PUSHER_APP_SECRET bound.
    const res = await callAndWait("/v1/manifest", {}, envWith({}));
    const served = await res.text();
    for (const secret of ["test-token-secret-0123456789abcdef", "test-admin-token", "test-pusher-secret-0123"]) {
      expect(served).not.toContain(secret);
    }
  });
});

describe("the manifest as docs/api.md and the OpenAPI document show it", () => {
  it("docs/api.md's example has every field the code always sends, and none it never sends", () => {
    const example = paths(documentedExample());
    const always = paths(manifestOf(BASE));
    const possible = paths(manifestOf({ ...BASE, ...ANOTHER_VALUE }));
    expect(
      [...always].filter((p) => !example.has(p)),
      "sent but not in the example",
    ).toEqual([]);
    expect(
      [...example].filter((p) => !possible.has(p)),
      "in the example but never sent",
    ).toEqual([]);
  });

  it("the OpenAPI Manifest schema names every field the code can send", async () => {
    const doc = (await (await call("/v1/openapi.json")).json()) as { components: { schemas: Record<string, Schema> } };
    const documented = schemaPaths(doc.components.schemas.Manifest as Schema, doc.components.schemas);
    const sent = paths(manifestOf({ ...BASE, ...ANOTHER_VALUE }));
    expect(sent.size).toBeGreaterThan(60);
    expect([...sent].filter((p) => !documented.has(p))).toEqual([]);
  });
});

interface Schema {
  $ref?: string;
  properties?: Record<string, Schema>;
  items?: Schema;
  anyOf?: Schema[];
  oneOf?: Schema[];
  allOf?: Schema[];
}

/** The key paths a JSON Schema describes, in the form {@link paths} writes, following `$ref`s. */
function schemaPaths(schema: Schema, all: Record<string, Schema>, at = "", out = new Set<string>()): Set<string> {
  const s = schema.$ref ? (all[schema.$ref.replace("#/components/schemas/", "")] ?? {}) : schema;
  for (const sub of [...(s.anyOf ?? []), ...(s.oneOf ?? []), ...(s.allOf ?? [])]) schemaPaths(sub, all, at, out);
  if (s.items) schemaPaths(s.items, all, `${at}[]`, out);
  for (const [k, v] of Object.entries(s.properties ?? {})) {
    const p = at ? `${at}.${k}` : k;
    out.add(p);
    schemaPaths(v, all, p, out);
  }
  return out;
}
