/**
 * Security headers: every API answer carries a CSP that allows nothing, forbids framing, and nosniff;
 * HSTS on every API answer and on the dashboard's files.
 */
import { env } from "cloudflare:workers";
import { describe, expect, it } from "vitest";
import headersFile from "../../../public/_headers?raw";
import { call, callAndWait, freshIp, mint, setRate, uniq } from "../../support/helpers";
import { closeQuietly, sse, ws } from "../../support/raw-requests";

describe("security headers", () => {
  it("every API answer carries a CSP that allows nothing and forbids framing, and nosniff", async () => {
    const ch = `public:bound.${uniq()}`;
    const answers = [
      await callAndWait("/healthz"),
      await callAndWait("/v1/manifest"),
      await callAndWait("/no/such/route"),
      await callAndWait("/metrics"),
      await callAndWait(`/v1/history/${ch}`, { headers: { "cf-connecting-ip": freshIp() } }),
      await sse(env, ch, { "cf-connecting-ip": freshIp() }),
      await ws(env, ch, { "cf-connecting-ip": freshIp() }),
    ];
    expect(answers.map((r) => r.status)).toEqual([200, 200, 404, 401, 200, 200, 101]);
    for (const res of answers) {
      const csp = res.headers.get("content-security-policy") ?? "";
      expect(csp).toContain("default-src 'none'");
      expect(csp).toContain("frame-ancestors 'none'");
      expect(res.headers.get("x-content-type-options")).toBe("nosniff");
      expect(res.headers.get("x-frame-options")).toBe("DENY");
      closeQuietly(res);
    }
  });

  it("a flood's 429s carry every security header other answers carry, from the shard and from the deny cache", async () => {
    const ch = `public:bound.${uniq()}`;
    const { access_token } = await mint({ sub: uniq("flood"), channels: [ch], rl: "1/h" });
    const publish = () =>
      callAndWait(`/v1/publish/${ch}`, {
        method: "POST",
        headers: { authorization: `Bearer ${access_token}`, "content-type": "application/json" },
        body: "{}",
      });
    expect((await publish()).status).toBe(200);
    // The first denial comes from the bucket's shard, the next from this isolate's deny cache.
    const denied = [await publish(), await publish()];
    const reference = await callAndWait("/no/such/route");
    const own = new Set(["content-type", "content-length", "retry-after", "ratelimit", "ratelimit-policy"]);
    const security = (res: Response) => Object.fromEntries([...res.headers].filter(([name]) => !own.has(name)));
    expect(Object.keys(security(reference)).length).toBeGreaterThanOrEqual(10);
    for (const res of denied) {
      expect(res.status).toBe(429);
      expect(security(res)).toEqual(security(reference));
      expect(res.headers.get("content-type")).toBe(reference.headers.get("content-type"));
      expect(res.headers.get("x-powered-by")).toBeNull();
      expect(await res.json()).toMatchObject({
        code: "resource_exhausted",
        msg: "publish rate limit exceeded",
        meta: { code: "RATE_LIMITED", bucket: "publish", retry_after_ms: expect.stringMatching(/^\d+$/) },
      });
    }
    await reference.body?.cancel();
  });

  it.each([
    ["a drop's 202", 1, {}, 202, { status: "dropped" }],
    ["a drop's 202 with an Idempotency-Key", 1, { "idempotency-key": "k-1" }, 202, { status: "dropped" }],
    ["a delivered 200", 0, {}, 200, { status: "delivered" }],
  ] as const)(
    "%s carries every security header other answers carry, and the budget's headers",
    async (_what, rate, extra, status, body) => {
      const ch = `public:bound.${uniq()}`;
      const { access_token } = await mint({ sub: uniq("drop"), channels: [ch], rl: "100/s" });
      await setRate(ch, rate);
      const res = await callAndWait(`/v1/publish/${ch}`, {
        method: "POST",
        headers: { authorization: `Bearer ${access_token}`, "content-type": "application/json", ...extra },
        body: "{}",
      });
      const reference = await callAndWait("/no/such/route");
      const own = new Set(["content-type", "content-length", "retry-after", "ratelimit", "ratelimit-policy"]);
      const security = (r: Response) => Object.fromEntries([...r.headers].filter(([name]) => !own.has(name)));
      expect(res.status).toBe(status);
      expect(security(res)).toEqual(security(reference));
      expect(res.headers.get("content-type")).toBe(reference.headers.get("content-type"));
      expect(res.headers.get("ratelimit")).toMatch(/^"publish";r=\d+;t=\d+$/);
      expect(await res.json()).toMatchObject(body);
      await reference.body?.cancel();
    },
  );
});

describe("HSTS", () => {
  it("every API answer carries Strict-Transport-Security for a year with subdomains, errors included", async () => {
    for (const res of [
      await call("/healthz"),
      await call("/v1/nope"),
      await callAndWait("/metrics", { headers: { "cf-connecting-ip": freshIp() } }),
    ]) {
      expect(res.headers.get("strict-transport-security")).toBe("max-age=31536000; includeSubDomains");
    }
  });

  it("the dashboard's files carry it too (public/_headers, served by the assets layer)", () => {
    expect(headersFile).toMatch(/^\s+Strict-Transport-Security: max-age=31536000; includeSubDomains$/m);
  });
});
