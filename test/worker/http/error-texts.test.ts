/**
 * Errors a newcomer can act on (docs/api.md, the error table): a malformed token says so and where a
 * good one comes from, a missing bearer says how to get one, and a 404 names the routes near the
 * one asked for — keeping the documented shape and status codes.
 */
import { describe, expect, it } from "vitest";
import { ADMIN_BEARER_REQUIRED, ADMIN_TOKEN_AS_ACCESS, MISSING_BEARER } from "../../../src/worker/auth/authorise";
import { MALFORMED } from "../../../src/worker/auth/tokens";
import { ADMIN, call, freshIp, mint, uniq } from "../../support/helpers";

const body = async (res: Response) => (await res.json()) as { code: string; msg: string; meta: { code: string } };

describe("error texts", () => {
  it("a token that is not one of ours is a malformed token, with where to mint one", async () => {
    for (const token of ["abc.def.ghi", "abc", "x".repeat(9000)]) {
      const res = await call(`/v1/publish/public:err.${uniq()}`, {
        method: "POST",
        headers: { authorization: `Bearer ${token}`, "cf-connecting-ip": freshIp() },
        body: "{}",
      });
      expect(res.status).toBe(401);
      expect(await body(res)).toEqual({ code: "unauthenticated", msg: MALFORMED, meta: { code: "UNAUTHENTICATED" } });
    }
    expect(MALFORMED).toMatch(/^malformed token: .*POST \/v1\/tokens/);
  });

  it("the admin token presented where an access token goes says it is the admin token and how to mint one", async () => {
    for (const path of [`/v1/publish/public:err.${uniq()}`, `/v1/history/private:err.${uniq()}.x`]) {
      const res = await call(path, {
        method: path.includes("publish") ? "POST" : "GET",
        headers: { authorization: `Bearer ${ADMIN}`, "cf-connecting-ip": freshIp() },
        ...(path.includes("publish") ? { body: "{}" } : {}),
      });
      expect(res.status).toBe(401);
      expect(await body(res)).toEqual({
        code: "unauthenticated",
        msg: ADMIN_TOKEN_AS_ACCESS,
        meta: { code: "UNAUTHENTICATED" },
      });
    }
    expect(ADMIN_TOKEN_AS_ACCESS).toMatch(/^this is the admin token: .*POST \/v1\/tokens/);
  });

  it("a missing bearer says how to get a token; an admin route says which token it wants", async () => {
    const res = await call(`/v1/publish/public:err.${uniq()}`, {
      method: "POST",
      headers: { "cf-connecting-ip": freshIp() },
      body: "{}",
    });
    expect(res.status).toBe(401);
    expect(await body(res)).toEqual({
      code: "unauthenticated",
      msg: MISSING_BEARER,
      meta: { code: "UNAUTHENTICATED" },
    });
    expect(MISSING_BEARER).toMatch(/POST \/v1\/tokens.*admin token.*docs\/api\.md/);
    const adminRes = await call("/v1/admin/overview", { headers: { "cf-connecting-ip": freshIp() } });
    expect(adminRes.status).toBe(401);
    expect((await body(adminRes)).msg).toBe(ADMIN_BEARER_REQUIRED);
  });

  it("a route asked with the wrong method names the method that exists", async () => {
    const ch = `public:err.${uniq()}`;
    const res = await call(`/v1/publish/${ch}`);
    expect(res.status).toBe(404);
    expect(await body(res)).toEqual({
      code: "bad_route",
      msg: `no such route: GET /v1/publish/${ch}; POST /v1/publish/{channel} exists: did you mean POST?`,
      meta: { code: "NOT_FOUND" },
    });
    const tokens = await body(await call("/v1/tokens"));
    expect(tokens.msg).toContain("POST /v1/tokens exists: did you mean POST?");
  });

  it("a route asked without /v1 says routes live under /v1/", async () => {
    const res = await call("/manifest");
    expect(res.status).toBe(404);
    expect((await body(res)).msg).toBe(
      "no such route: GET /manifest; routes live under /v1/: did you mean GET /v1/manifest?",
    );
    const { access_token } = await mint({ sub: uniq(), channels: ["public:err.*"] });
    const publish = await call(`/publish/public:err.${uniq()}`, {
      method: "POST",
      headers: { authorization: `Bearer ${access_token}` },
      body: "{}",
    });
    expect(publish.status).toBe(404);
    expect((await body(publish)).msg).toMatch(
      /routes live under \/v1\/: did you mean POST \/v1\/publish\/\{channel\}\?$/,
    );
    const nowhere = await body(await call("/v1/nothing"));
    expect(nowhere.msg).toBe(
      "no such route: GET /v1/nothing; the routes are listed in GET /v1/openapi.json and docs/api.md (routes live under /v1/)",
    );
  });
});
