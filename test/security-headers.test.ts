/**
 * Security headers: every API answer carries a CSP that allows nothing, forbids framing, and nosniff.
 */
import { env } from "cloudflare:workers";
import { describe, expect, it } from "vitest";
import { callAndWait, freshIp, uniq } from "./helpers";
import { closeQuietly, sse, ws } from "./raw-requests";

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
});
