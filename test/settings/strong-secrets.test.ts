/**
 * Strong secrets: a short TOKEN_SECRET or ADMIN_TOKEN fails the routes that need it and the health check,
 * naming it; a public ANALYTICS_CHANNEL is bad configuration; the shipped secrets are strong enough.
 */
import { env } from "cloudflare:workers";
import { describe, expect, it } from "vitest";
import devVarsExample from "../../.dev.vars.example?raw";
import { secretProblem } from "../../src/settings/secrets";
import { ADMIN, adminHeaders, callAndWait, envWith, freshIp, uniq } from "../support/helpers";

describe("strong secrets", () => {
  const mintWith = (e: Env) =>
    callAndWait(
      "/v1/tokens",
      {
        method: "POST",
        headers: adminHeaders({ "cf-connecting-ip": freshIp() }),
        body: JSON.stringify({ sub: "a", channels: ["public:a.b"] }),
      },
      e,
    );

  it("a TOKEN_SECRET shorter than 32 bytes fails the routes that need it and the health check, naming it", async () => {
    const weak = envWith({ TOKEN_SECRET: "x".repeat(31) });
    for (const res of [
      await mintWith(weak),
      await callAndWait(`/v1/publish/public:bound.${uniq()}`, { method: "POST", body: "1" }, weak),
      await callAndWait("/healthz", {}, weak),
    ]) {
      expect(res.status).toBe(500);
      expect(await res.json()).toMatchObject({
        code: "internal",
        msg: expect.stringContaining("TOKEN_SECRET"),
        meta: { variable: "TOKEN_SECRET" },
      });
    }
    // 32 bytes is enough, counted in bytes: 16 two-byte characters.
    expect((await mintWith(envWith({ TOKEN_SECRET: "x".repeat(32) }))).status).toBe(201);
    expect((await mintWith(envWith({ TOKEN_SECRET: "é".repeat(16) }))).status).toBe(201);
    expect((await callAndWait("/healthz", {}, envWith({ TOKEN_SECRET: "é".repeat(15) }))).status).toBe(500);
  });

  it("an ADMIN_TOKEN shorter than 16 characters fails admin routes and the health check, even when presented", async () => {
    const admin = "y".repeat(15);
    const weak = envWith({ ADMIN_TOKEN: admin });
    for (const res of [
      await callAndWait("/metrics", { headers: { authorization: `Bearer ${admin}` } }, weak),
      await mintWith(envWith({ ADMIN_TOKEN: admin })),
      await callAndWait("/healthz", {}, weak),
    ]) {
      expect(res.status).toBe(500);
      expect(await res.json()).toMatchObject({
        msg: expect.stringContaining("ADMIN_TOKEN"),
        meta: { variable: "ADMIN_TOKEN" },
      });
    }
    const strong = envWith({ ADMIN_TOKEN: "y".repeat(16) });
    expect(
      (await callAndWait("/metrics", { headers: { authorization: `Bearer ${"y".repeat(16)}` } }, strong)).status,
    ).toBe(200);
  });

  it("a public ANALYTICS_CHANNEL is bad configuration", async () => {
    const e = envWith({ ANALYTICS_CHANNEL: "public:floodgate.dropped" });
    const res = await callAndWait("/healthz", {}, e);
    expect(res.status).toBe(500);
    expect(await res.json()).toMatchObject({
      meta: { variable: "ANALYTICS_CHANNEL" },
      msg: expect.stringContaining("private"),
    });
  });

  it("the shipped development and test secrets are strong enough", () => {
    const vars = Object.fromEntries(
      devVarsExample
        .split("\n")
        .filter((l) => /^[A-Z_]+=/.test(l))
        .map((l) => [l.slice(0, l.indexOf("=")), l.slice(l.indexOf("=") + 1).trim()]),
    );
    expect(secretProblem("TOKEN_SECRET", vars.TOKEN_SECRET)).toBeNull();
    expect(secretProblem("ADMIN_TOKEN", vars.ADMIN_TOKEN)).toBeNull();
    expect(secretProblem("TOKEN_SECRET", env.TOKEN_SECRET)).toBeNull();
    expect(secretProblem("ADMIN_TOKEN", env.ADMIN_TOKEN)).toBeNull();
    expect(env.ADMIN_TOKEN).toBe(ADMIN);
  });
});
