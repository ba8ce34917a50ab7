/**
 * Bad input over HTTP: hostile bodies, headers and forged tokens each get the API's error (never a
 * 500, never backend text) and leave the channel's state unchanged.
 */
import { env } from "cloudflare:workers";
import { describe, expect, it } from "vitest";
import { base64UrlEncode, signToken } from "../../../src/worker/auth/tokens";
import { ADMIN, call, channelStats, historyOf, publisher, publishTo, uniq } from "../../support/helpers";

const SECRET = "test-token-secret-0123456789abcdef";

/** The channel's stats, once the requests before have finished their background work. */

async function lastSeq(ch: string): Promise<number> {
  return (await channelStats(ch)).last_seq;
}

async function expectError(res: Response, status: number, code: string): Promise<void> {
  expect(res.status).toBe(status);
  const text = await res.text();
  const body = JSON.parse(text) as { code: string; msg: string; meta: { code: string } };
  expect(body.code).toBe(code);
  expect(typeof body.msg).toBe("string");
  expect(text).not.toMatch(/at .*\.(ts|js):\d+|Error:|stack/);
}

describe("hostile bodies and headers", () => {
  it("deeply nested JSON is delivered exactly or refused with 400, never a 500", async () => {
    const ch = `public:hostile.${uniq()}`;
    const t = await publisher("public:hostile.*");
    for (const depth of [1000, 16_000]) {
      const body = `${"[".repeat(depth)}${"]".repeat(depth)}`;
      const res = await call(`/v1/publish/${ch}`, {
        method: "POST",
        headers: { authorization: `Bearer ${t}`, "content-type": "application/json" },
        body,
      });
      expect([200, 400]).toContain(res.status);
      if (res.status === 400) await expectError(res, 400, "invalid_argument");
    }
  });

  it("a huge Authorization header or Idempotency-Key is a 401 / 400 and charges nothing", async () => {
    const ch = `public:hostile.${uniq()}`;
    const t = await publisher("public:hostile.*");
    const before = await lastSeq(ch);
    await expectError(
      await call(`/v1/publish/${ch}`, {
        method: "POST",
        headers: { authorization: `Bearer ${"A".repeat(100_000)}` },
        body: "{}",
      }),
      401,
      "unauthenticated",
    );
    await expectError(
      await publishTo(ch, t, { x: 1 }, { "idempotency-key": "k".repeat(100_000) }),
      400,
      "invalid_argument",
    );
    await expectError(await publishTo(ch, t, { x: 1 }, { "idempotency-key": "has space" }), 400, "invalid_argument");
    expect(await lastSeq(ch)).toBe(before);
  });

  it("thousands of query parameters are handled, not a 500", async () => {
    const ch = `public:hostile.${uniq()}`;
    const t = await publisher("public:hostile.*");
    await publishTo(ch, t, { x: 1 });
    const junk = Array.from({ length: 5000 }, (_, i) => `p${i}=${i}`).join("&");
    const res = await call(`/v1/history/${ch}?${junk}&limit=10`);
    expect(res.status).toBe(200);
    expect(((await res.json()) as { messages: unknown[] }).messages).toHaveLength(1);
    const repeated = Array.from({ length: 5000 }, () => "after=0").join("&");
    expect((await call(`/v1/history/${ch}?${repeated}`)).status).toBe(200);
    await expectError(await call(`/v1/history/${ch}?after=-1`), 400, "invalid_argument");
    await expectError(await call(`/v1/history/${ch}?limit=1e3`), 400, "invalid_argument");
  });

  it("path traversal and encoded separators in channel names are 400s or 404s", async () => {
    const t = await publisher("public:hostile.*");
    for (const path of [
      "/v1/publish/public:hostile.%2e%2e",
      "/v1/publish/public:..%2F..%2Fadmin.x",
      "/v1/publish/public:hostile.a%00b",
      "/v1/publish/public:hostile.A",
      "/v1/publish/private:floodgate.analytics.dropped%2F..",
    ]) {
      const res = await call(path, {
        method: "POST",
        headers: { authorization: `Bearer ${t}`, "content-type": "application/json" },
        body: "{}",
      });
      expect([400, 403, 404], path).toContain(res.status);
      await res.text();
    }
    const res = await call("/v1/publish/../v1/admin/throttle/*", { method: "PUT", body: '{"rate":1}' });
    expect([401, 404]).toContain(res.status);
    expect(await env.THROTTLE_KV.get("throttleRate")).toBeNull();
  });
});

describe("hostile tokens", () => {
  const now = () => Math.floor(Date.now() / 1000);
  const claims = () => ({
    sub: "mallory",
    typ: "access" as const,
    chs: ["public:**"],
    scp: ["publish" as const, "subscribe" as const],
    iat: now(),
    exp: now() + 600,
    jti: uniq("j"),
  });
  const enc = (v: unknown) => base64UrlEncode(new TextEncoder().encode(JSON.stringify(v)));

  it("alg none, another algorithm, or a signature by the admin token are 401s", async () => {
    const ch = `public:hostile.${uniq()}`;
    const payload = enc(claims());
    const forged = [
      `${enc({ alg: "none", typ: "JWT" })}.${payload}.`,
      `${enc({ alg: "HS512", typ: "JWT" })}.${payload}.${enc("x")}`,
      `${enc({ alg: "RS256", typ: "JWT" })}.${payload}.${enc("x")}`,
      await signToken(claims(), ADMIN), // the admin token used as the HMAC key
      await signToken({ ...claims(), typ: "refresh" } as never, SECRET), // a refresh token as an access token
    ];
    for (const token of forged) {
      await expectError(await publishTo(ch, token, { x: 1 }), 401, "unauthenticated");
    }
    // The admin token itself is not an access token, and a user token is not the admin token.
    await expectError(await publishTo(ch, ADMIN, { x: 1 }), 401, "unauthenticated");
    const real = await signToken(claims(), SECRET);
    await expectError(
      await call("/v1/admin/throttle/*", {
        method: "PUT",
        headers: { authorization: `Bearer ${real}` },
        body: '{"rate":1}',
      }),
      401,
      "unauthenticated",
    );
    expect(await lastSeq(ch)).toBe(0);
  });
});

describe("state is unchanged by refused publishes", () => {
  it("history holds only the accepted message after a barrage of bad requests", async () => {
    const ch = `public:hostile.${uniq()}`;
    const t = await publisher("public:hostile.*");
    const bad: RequestInit[] = [
      { method: "POST", headers: { authorization: `Bearer ${t}` }, body: "{" },
      { method: "POST", headers: { authorization: `Bearer ${t}` }, body: "" },
      { method: "POST", headers: { authorization: `Bearer ${t}` }, body: new Uint8Array([0xff, 0xfe, 0x22]) },
      { method: "POST", headers: { authorization: `Bearer ${t}` }, body: "x".repeat(40_000) },
      { method: "POST", headers: { authorization: "Bearer " }, body: "{}" },
      { method: "POST", body: "{}" },
    ];
    for (const init of bad) {
      const res = await call(`/v1/publish/${ch}`, init);
      expect(res.status).toBeGreaterThanOrEqual(400);
      expect(res.status).toBeLessThan(500);
      await res.text();
    }
    expect((await publishTo(ch, t, { ok: true })).status).toBe(200);
    const h = await historyOf(ch, null);
    expect(h.map((f) => f.data)).toEqual([{ ok: true }]);
  });
});
