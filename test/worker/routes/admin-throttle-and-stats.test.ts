/** Admin throttle routes, channel stats and the admin bearer. */

import { env } from "cloudflare:workers";
import { describe, expect, it } from "vitest";
import { ADMIN_BEARER_REQUIRED } from "../../../src/worker/auth/authorise";
import {
  ADMIN,
  adminHeaders,
  call,
  callAndWait,
  envWith,
  freshIp,
  mint,
  openSocket,
  publishTo,
  uniq,
  untilUnsubscribed,
} from "../../support/helpers";

const put = (ch: string, body: string, headers = adminHeaders()) =>
  call(`/v1/admin/throttle/${ch}`, { method: "PUT", headers, body });

describe("admin throttle", () => {
  it("PUT writes the rate, GET reads it with target and last sample, DELETE removes it", async () => {
    const ch = `public:adm.${uniq()}`;
    const res = await put(ch, JSON.stringify({ rate: 0.25 }));
    expect(res.status).toBe(200);
    expect(await res.json()).toEqual({ channel: ch, rate: 0.25, target: null, last_sample: null });
    expect(await env.THROTTLE_KV.get(`throttleRate:${ch}`)).toBe("0.25");
    const got = await call(`/v1/admin/throttle/${ch}`, { headers: adminHeaders() });
    expect(await got.json()).toEqual({ channel: ch, rate: 0.25, target: null, last_sample: null });
    const del = await call(`/v1/admin/throttle/${ch}`, { method: "DELETE", headers: adminHeaders() });
    expect(del.status).toBe(204);
    expect(await env.THROTTLE_KV.get(`throttleRate:${ch}`)).toBeNull();
    const after = await call(`/v1/admin/throttle/${ch}`, { headers: adminHeaders() });
    expect(await after.json()).toMatchObject({ rate: null });
  });

  it("* is the global key", async () => {
    expect((await put("*", JSON.stringify({ rate: 0 }))).status).toBe(200);
    expect(await env.THROTTLE_KV.get("throttleRate")).toBe("0");
    expect((await call("/v1/admin/throttle/*", { method: "DELETE", headers: adminHeaders() })).status).toBe(204);
    expect(await env.THROTTLE_KV.get("throttleRate")).toBeNull();
  });

  it.each([
    ['{"rate":1.5}'],
    ['{"rate":-0.1}'],
    ['{"rate":"0.5"}'],
    ['{"rate":null}'],
    ["{}"],
    ['{"rate":0.5,"extra":1}'],
    ["[0.5]"],
    ["0.5x"],
  ])("refuses %s with 400 and changes nothing", async (body) => {
    const ch = `public:adm.${uniq()}`;
    await put(ch, JSON.stringify({ rate: 0.1 }));
    const res = await put(ch, body);
    expect(res.status).toBe(400);
    expect(await res.json()).toMatchObject({ code: "invalid_argument", meta: { code: "INVALID_ARGUMENT" } });
    expect(await env.THROTTLE_KV.get(`throttleRate:${ch}`)).toBe("0.1");
  });

  it("refuses a bad channel name with 400", async () => {
    expect((await put("public:NOPE", JSON.stringify({ rate: 0.1 }))).status).toBe(400);
  });

  it("answers 401 without the admin bearer, or with a user token", async () => {
    const ch = `public:adm.${uniq()}`;
    const user = (await mint({ sub: "u", channels: ["public:adm.*"] })).access_token;
    // Each client its own address: these failures are charged to its admin-auth budget (20).
    const variants: Record<string, string>[] = [
      { "cf-connecting-ip": freshIp() },
      { authorization: "Bearer wrong", "cf-connecting-ip": freshIp() },
      { authorization: `Bearer ${user}`, "cf-connecting-ip": freshIp() },
    ];
    for (const headers of variants) {
      expect((await put(ch, JSON.stringify({ rate: 1 }), headers)).status).toBe(401);
      expect((await call(`/v1/admin/throttle/${ch}`, { headers })).status).toBe(401);
      expect((await call(`/v1/admin/throttle/${ch}`, { method: "DELETE", headers })).status).toBe(401);
      expect((await call(`/v1/channels/${ch}/stats`, { headers })).status).toBe(401);
      expect((await call("/metrics", { headers })).status).toBe(401);
    }
    expect(await env.THROTTLE_KV.get(`throttleRate:${ch}`)).toBeNull();
  });

  it("answers every bad admin header with the API's 401, and takes the token in any case of Bearer", async () => {
    for (const authorization of [
      "Basic dGVzdA==",
      "Bearer",
      "Bearer two words",
      `Bearer ${ADMIN}!`,
      `Bearer  ${ADMIN.slice(1)}`,
      `Token ${ADMIN}`,
    ]) {
      const res = await call("/v1/admin/sample", {
        method: "POST",
        headers: { authorization, "cf-connecting-ip": freshIp() },
      });
      expect(res.status, authorization).toBe(401);
      expect(await res.json()).toEqual({
        code: "unauthenticated",
        msg: ADMIN_BEARER_REQUIRED,
        meta: { code: "UNAUTHENTICATED" },
      });
      expect(res.headers.get("www-authenticate")).toMatch(/^Bearer/);
      // The app's security headers are on this answer too.
      expect(res.headers.get("x-content-type-options")).toBe("nosniff");
    }
    const lower = await call("/v1/admin/throttle/*", { headers: { authorization: `bearer ${ADMIN}` } });
    expect(lower.status).toBe(200);
  });

  it("fails closed with 500 naming ADMIN_TOKEN when it is unset or could never be sent as a bearer", async () => {
    for (const admin of [undefined, "has spaces in it, 16+ characters"]) {
      const res = await callAndWait(
        "/v1/admin/sample",
        { method: "POST", headers: { authorization: `Bearer ${admin}` } },
        envWith({ ADMIN_TOKEN: admin }),
      );
      expect(res.status).toBe(500);
      expect(await res.json()).toMatchObject({ code: "internal", meta: { variable: "ADMIN_TOKEN" } });
    }
  });
});

describe("channel stats", () => {
  it("shows occupancy, totals and the current drop rate", async () => {
    const ch = `public:adm.${uniq()}`;
    const t = (await mint({ sub: uniq(), channels: ["public:adm.*"] })).access_token;
    const s = await openSocket(ch);
    await publishTo(ch, t, 1);
    await publishTo(ch, t, 2);
    await put(ch, JSON.stringify({ rate: 0.5 }));
    const res = await call(`/v1/channels/${ch}/stats`, { headers: adminHeaders() });
    expect(res.status).toBe(200);
    expect(await res.json()).toMatchObject({
      channel: ch,
      occupancy: 1,
      websockets: 1,
      delivered_total: 2,
      dropped_total: 0,
      drop_rate: 0.5,
      target: null,
      last_sample: null,
    });
    s.ws.close();
    await untilUnsubscribed(ch);
  });
});
