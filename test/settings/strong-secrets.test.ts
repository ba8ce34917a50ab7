/**
 * Strong secrets: a short TOKEN_SECRET or ADMIN_TOKEN fails the routes that need it and the health check,
 * naming it; a public ANALYTICS_CHANNEL is bad configuration; the shipped secrets are strong enough; no
 * answer reveals a secret's length, and the example secrets the repository shows are found, so the
 * deploy check can refuse them.
 */
import { env } from "cloudflare:workers";
import { describe, expect, it } from "vitest";
import devVarsExample from "../../.dev.vars.example?raw";
import apiDoc from "../../docs/api.md?raw";
import operationsDoc from "../../docs/operations.md?raw";
import throttlingDoc from "../../docs/throttling.md?raw";
import readme from "../../README.md?raw";
import { exampleSecrets, SECRET_MIN, secretProblem } from "../../src/settings/secrets";
import { ADMIN, adminHeaders, callAndWait, envWith, freshIp, uniq } from "../support/helpers";
import vitestConfig from "../vitest.config.ts?raw";

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

describe("nothing reveals a secret", () => {
  it("a weak secret's problem states the minimum, never the secret's own length", async () => {
    for (const length of [1, 7, 15, 31]) {
      const problem = secretProblem("TOKEN_SECRET", "x".repeat(length)) as string;
      expect(problem).toContain(`at least ${SECRET_MIN.TOKEN_SECRET.length} bytes`);
      expect(problem.replace(String(SECRET_MIN.TOKEN_SECRET.length), "")).not.toMatch(/\d/);
    }
    const admin = secretProblem("ADMIN_TOKEN", "y".repeat(9)) as string;
    expect(admin).toContain("at least 16 characters");
    expect(admin).not.toContain("9");
    // Nor the 500 a route answers with it.
    const res = await callAndWait("/healthz", {}, envWith({ TOKEN_SECRET: "z".repeat(29) }));
    expect(res.status).toBe(500);
    expect(await res.text()).not.toContain("29");
  });

  it("finds the example secrets the repository shows, so the deploy check can refuse them", () => {
    const shown = exampleSecrets([devVarsExample, readme, apiDoc, operationsDoc, throttlingDoc, vitestConfig]);
    const devVars = Object.fromEntries(
      devVarsExample
        .split("\n")
        .filter((l) => /^[A-Z_]+=/.test(l))
        .map((l) => [l.slice(0, l.indexOf("=")), l.slice(l.indexOf("=") + 1).trim()]),
    );
    expect(shown).toContain(devVars.TOKEN_SECRET);
    expect(shown).toContain(devVars.ADMIN_TOKEN);
    // The Pusher door's development secret, which `npm start` opens the door with.
    expect(devVars.PUSHER_APP_SECRET).toBeTruthy();
    expect(shown).toContain(devVars.PUSHER_APP_SECRET);
    expect(shown).toContain("test-pusher-secret-0123");
    expect(shown).toContain("test-token-secret-0123456789abcdef");
    expect(shown).toContain("test-admin-token");
    // `Bearer <token>` examples in prose count; placeholders do not.
    expect(exampleSecrets(["curl -H 'Authorization: Bearer some-long-admin-token-123'"])).toContain(
      "some-long-admin-token-123",
    );
    expect([...exampleSecrets(["Bearer $ADMIN", "Bearer <ADMIN_TOKEN>", `Bearer $${"{"}token}`])]).toEqual([]);
    expect(shown).not.toContain(`private-${crypto.randomUUID()}`);
  });
});
