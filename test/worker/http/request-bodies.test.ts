/**
 * Request bodies of the token and admin routes: each refusal is the API's 400 naming the body's
 * first problem (an unknown field before anything else), and changes nothing.
 */
import { env } from "cloudflare:workers";
import { describe, expect, it } from "vitest";
import { rateKey } from "../../../functions/before-publish";
import { adminHeaders, call, freshIp, uniq } from "../../support/helpers";

const RAW = Symbol("raw");
type Body = unknown;

/** `{ [RAW]: text }` sends `text` as is; anything else is sent as JSON. */
const raw = (text: string) => ({ [RAW]: text });
const text = (body: Body) =>
  body !== null && typeof body === "object" && RAW in body ? (body as { [RAW]: string })[RAW] : JSON.stringify(body);

async function refusal(path: string, method: string, body: Body, headers = adminHeaders()) {
  const res = await call(path, {
    method,
    headers: { ...headers, "cf-connecting-ip": freshIp() },
    body: text(body),
  });
  expect(res.status).toBe(400);
  const json = (await res.json()) as { code: string; msg: string; meta: { code: string } };
  expect(json).toMatchObject({ code: "invalid_argument", meta: { code: "INVALID_ARGUMENT" } });
  return json.msg;
}

const SUB = "sub must be 1-128 characters of A-Z a-z 0-9 _ . : @ -";
const CHANNELS = "channels must be a list of 1 to 32 channel patterns";

describe("POST /v1/tokens body", () => {
  const ok = { sub: "a", channels: ["public:a.b"] };
  it.each([
    [{ channels: ["public:a.b"] }, SUB],
    [{ sub: "a b", channels: ["public:a.b"] }, SUB],
    [{ sub: 5, channels: ["public:a.b"] }, SUB],
    [{ sub: "a" }, CHANNELS],
    [{ sub: "a", channels: [] }, CHANNELS],
    [{ sub: "a", channels: "public:a.b" }, CHANNELS],
    [{ sub: "a", channels: Array.from({ length: 33 }, (_, i) => `public:a.c${i}`) }, CHANNELS],
    [{ sub: "a", channels: [1] }, "channels must be strings"],
    [{ sub: "a", channels: ["public:a.**.b"] }, /^channels: public:a\.\*\*\.b: ./],
    [{ ...ok, scopes: ["admin"] }, 'scopes must be a list of "publish", "subscribe", "priority", "broadcast"'],
    [{ ...ok, scopes: "publish" }, 'scopes must be a list of "publish", "subscribe", "priority", "broadcast"'],
    [{ ...ok, ttl: 300 }, 'ttl must be a duration string such as "5m"'],
    [{ ...ok, ttl: "5 minutes" }, /^ttl: ./],
    [{ ...ok, ttl: "500ms" }, "ttl must be at least 1s"],
    [{ ...ok, ttl: "25h" }, "ttl must be at most 24h"],
    [{ ...ok, refresh_ttl: "8d" }, "refresh_ttl must be at most 7d"],
    [{ ...ok, rl: "fast" }, /^rl: ./],
    [{ ...ok, rl: "0/s" }, "rl: rl must not be disabled (a rate of 0)"],
    [{ sub: "a b", admin: true }, 'unknown field "admin"'],
    [raw("[1,2]"), "body must be a JSON object"],
    [raw("null"), "body must be a JSON object"],
    [raw("{"), "body is not valid JSON"],
  ] as [Body, string | RegExp][])("refuses %j: %s", async (body, msg) => {
    expect(await refusal("/v1/tokens", "POST", body)).toMatch(msg);
  });

  it("takes a body without a JSON content type, as before", async () => {
    const res = await call("/v1/tokens", {
      method: "POST",
      headers: { authorization: adminHeaders().authorization as string, "cf-connecting-ip": freshIp() },
      body: JSON.stringify({ ...ok, scopes: ["publish", "publish"], ttl: "90s", rl: "10/s" }),
    });
    expect(res.status).toBe(201);
    const { access_token } = (await res.json()) as { access_token: string };
    const claims = JSON.parse(atob((access_token.split(".")[1] as string).replace(/-/g, "+").replace(/_/g, "/")));
    expect(claims).toMatchObject({ scp: ["publish"], rl: { rate: 10, per: "1s" } });
    expect(claims.exp - claims.iat).toBe(90);
  });
});

describe("POST /v1/tokens/refresh body", () => {
  it.each([
    [{}, "refresh_token is required"],
    [{ refresh_token: "" }, "refresh_token is required"],
    [{ refresh_token: 7 }, "refresh_token is required"],
    [{ refresh_token: "x", extra: 1 }, 'unknown field "extra"'],
    [raw("[]"), "body must be a JSON object"],
  ] as [Body, string][])("refuses %j: %s", async (body, msg) => {
    expect(await refusal("/v1/tokens/refresh", "POST", body, {})).toBe(msg);
  });
});

describe("admin bodies", () => {
  const RATE = "rate must be a number between 0 and 1";
  it.each([
    [{}, RATE],
    [{ rate: "0.5" }, RATE],
    [{ rate: 1.5 }, RATE],
    [{ rate: -0.1 }, RATE],
    [{ rate: 0.5, extra: 1 }, 'unknown field "extra"'],
    [raw("[0.5]"), 'body must be {"rate": <number in [0,1]>}'],
  ] as [Body, string][])("PUT /v1/admin/throttle refuses %j: %s, and stores nothing", async (body, msg) => {
    const ch = `public:bodies.${uniq()}`;
    expect(await refusal(`/v1/admin/throttle/${ch}`, "PUT", body)).toBe(msg);
    expect(await env.THROTTLE_KV.get(rateKey(ch))).toBeNull();
  });

  it("names a bad channel before a bad body", async () => {
    expect(await refusal("/v1/admin/throttle/nope", "PUT", { rate: 7 })).not.toBe(RATE);
    expect(await refusal("/v1/admin/target/nope", "PUT", { target: 7 })).toMatch(/channel|visibility|nope/i);
  });

  it.each([
    [{ target: "fast" }, /^target: ./],
    [{ target: "0/s" }, "target must be a positive rate; DELETE clears it"],
    [{}, /^target: a target must be/],
    [{ target: "5/s", extra: 1 }, 'unknown field "extra"'],
    [raw("[]"), 'body must be {"target": "50/s"} or {"target": {"deliveries": "5000/s"}}'],
  ] as [Body, string | RegExp][])("PUT /v1/admin/target refuses %j: %s", async (body, msg) => {
    const ch = `public:bodies.${uniq()}`;
    expect(await refusal(`/v1/admin/target/${ch}`, "PUT", body)).toMatch(msg);
  });
});
