/**
 * Every refusal is counted (docs/operations.md, "Metrics"): `floodgate_refusals_total{reason}` grows by
 * one for each 401, 403, 429 (by its bucket's name, `subscriptions` included) and 503 (by the reason
 * its `Floodgate-Refusal` header names: a bound, or `unavailable` for a backend that failed), whichever
 * route answered it and whether it threw its error or built its answer (the limiter's 429s). The 503s
 * of bounds met elsewhere: publish_overflow in test/worker/publish-batching.test.ts, export_too_dense
 * in test/worker/record/record-bucket.test.ts; a Pusher connection a full host refused (host_full) in
 * test/connection-host/pusher-connections.test.ts.
 */
import { describe, expect, it } from "vitest";
import { ChannelObject } from "../../../src/channel/channel-object";
import {
  call,
  callAndWait,
  env,
  envWith,
  freshIp,
  grown,
  mint,
  publishTo,
  refusalsGrown,
  scrapeMetrics,
  uniq,
  until,
  withFailing,
} from "../../support/helpers";

const refusals = (reason: string) => `floodgate_refusals_total{reason="${reason}"}`;

/** A WebSocket subscribe to `ch` through a Worker with `customEnv`, from a client IP of its own. */
function subscribe(ch: string, customEnv: Env, token?: string): Promise<Response> {
  const headers: Record<string, string> = { upgrade: "websocket", "cf-connecting-ip": freshIp() };
  if (token) headers.authorization = `Bearer ${token}`;
  return callAndWait(`/v1/subscribe/${ch}`, { headers }, customEnv);
}

describe("refusals counted by reason", () => {
  it("shows every reason at 0 before any refusal, and none for answers that are not refusals", async () => {
    const metrics = await scrapeMetrics();
    for (const reason of [
      "unauthenticated",
      "permission_denied",
      "publish",
      "subscribe",
      "token-issue",
      "read",
      "admin-auth",
      "subscriptions",
      "connections",
      "host_full",
      "max_subscribers",
      "anonymous_subscribers",
      "publish_overflow",
      "export_too_dense",
      "unavailable",
    ])
      expect(metrics[refusals(reason)]).toBeGreaterThanOrEqual(0);
    for (const reason of ["history_gap", "internal", "slow", "expired", "revoked"])
      expect(metrics[`floodgate_subscriptions_closed_total{reason="${reason}"}`]).toBeGreaterThanOrEqual(0);
    const before = await scrapeMetrics();
    const ch = `public:counted.${uniq()}`;
    const t = (await mint({ sub: uniq(), channels: ["public:counted.*"] })).access_token;
    expect(
      (await callAndWait(`/v1/publish/${ch}`, { method: "POST", headers: { authorization: `Bearer ${t}` }, body: "1" }))
        .status,
    ).toBe(200);
    expect((await callAndWait(`/v1/publish/${ch}`, { method: "POST", body: "{" })).status).toBe(401);
    expect((await callAndWait("/v1/nowhere")).status).toBe(404);
    const grew = grown(before, await scrapeMetrics());
    expect(Object.keys(grew).filter((k) => k.startsWith("floodgate_refusals_total"))).toEqual([
      refusals("unauthenticated"),
    ]);
    expect(grew[refusals("unauthenticated")]).toBe(1);
  });

  it("401 and 403", async () => {
    const before = await scrapeMetrics();
    const t = (await mint({ sub: uniq(), channels: ["public:mine.*"] })).access_token;
    expect((await publishTo(`public:counted.${uniq()}`, "not-a-token", 1)).status).toBe(401);
    expect((await publishTo(`public:counted.${uniq()}`, t, 1)).status).toBe(403);
    expect((await call("/v1/admin/throttle/*", { headers: { authorization: "Bearer wrong" } })).status).toBe(401);
    await until(async () => {
      const grew = grown(before, await scrapeMetrics());
      return grew[refusals("unauthenticated")] === 2 && grew[refusals("permission_denied")] === 1;
    }, "two 401s and a 403 counted");
  });

  it("each 429 by its bucket: a budget's, and the per-client subscription cap's", async () => {
    const tight = envWith({ READ_RATE: "1/h", READ_BURST: "1", MAX_SUBSCRIPTIONS_PER_CLIENT: "1" });
    const before = await scrapeMetrics(tight);
    const ip = { "cf-connecting-ip": "192.0.2.77" };
    const ch = `public:counted.${uniq()}`;
    expect((await callAndWait(`/v1/history/${ch}`, { headers: ip }, tight)).status).toBe(200);
    expect((await callAndWait(`/v1/history/${ch}`, { headers: ip }, tight)).status).toBe(429);
    expect((await callAndWait(`/v1/history/${ch}`, { headers: ip }, tight)).status).toBe(429);
    const t = (await mint({ sub: uniq(), channels: ["public:counted.*"] })).access_token;
    const sub = { authorization: `Bearer ${t}`, upgrade: "websocket" };
    const first = await callAndWait(`/v1/subscribe/${ch}`, { headers: sub }, tight);
    expect(first.status).toBe(101);
    first.webSocket?.accept();
    expect((await callAndWait(`/v1/subscribe/${ch}`, { headers: sub }, tight)).status).toBe(429);
    const grew = grown(before, await scrapeMetrics(tight));
    expect(grew[refusals("read")]).toBe(2);
    expect(grew[refusals("subscriptions")]).toBe(1);
    first.webSocket?.close();
  });

  it("503 max_subscribers: a channel at MAX_SUBSCRIBERS names it in Floodgate-Refusal and is counted under it", async () => {
    const full = envWith({ MAX_SUBSCRIBERS: "1" });
    const before = await scrapeMetrics(full);
    const ch = `public:counted.${uniq()}`;
    const holder = async () => (await mint({ sub: uniq(), channels: ["public:counted.*"] })).access_token;
    const one = await subscribe(ch, full, await holder());
    expect(one.status).toBe(101);
    one.webSocket?.accept();
    const two = await subscribe(ch, full, await holder());
    expect(two.status).toBe(503);
    expect(two.headers.get("floodgate-refusal")).toBe("max_subscribers");
    expect(refusalsGrown(before, await scrapeMetrics(full))).toEqual({ [refusals("max_subscribers")]: 1 });
    one.webSocket?.close();
  });

  it("503 anonymous_subscribers: an anonymous subscribe past ANONYMOUS_SHARE, while a token holder still gets in", async () => {
    const shared = envWith({ MAX_SUBSCRIBERS: "4", ANONYMOUS_SHARE: "0.5" });
    const before = await scrapeMetrics(shared);
    const ch = `public:counted.${uniq()}`;
    const open = [await subscribe(ch, shared), await subscribe(ch, shared)];
    for (const r of open) {
      expect(r.status).toBe(101);
      r.webSocket?.accept();
    }
    const third = await subscribe(ch, shared);
    expect(third.status).toBe(503);
    expect(third.headers.get("floodgate-refusal")).toBe("anonymous_subscribers");
    const holder = await subscribe(
      ch,
      shared,
      (await mint({ sub: uniq(), channels: ["public:counted.*"] })).access_token,
    );
    expect(holder.status).toBe(101);
    holder.webSocket?.accept();
    expect(refusalsGrown(before, await scrapeMetrics(shared))).toEqual({ [refusals("anonymous_subscribers")]: 1 });
    for (const r of [...open, holder]) r.webSocket?.close();
  });

  it("503 unavailable: a channel object that failed, told apart from every bound", async () => {
    const before = await scrapeMetrics();
    const ch = `public:counted.${uniq()}`;
    const res = await withFailing(ChannelObject, "assignRelay", "SQLITE_BUSY: backend detail", () =>
      subscribe(ch, env),
    );
    expect(res.status).toBe(503);
    expect(res.headers.get("floodgate-refusal")).toBe("unavailable");
    expect(await res.text()).not.toMatch(/SQLITE|backend detail/);
    expect(refusalsGrown(before, await scrapeMetrics())).toEqual({ [refusals("unavailable")]: 1 });
  });

  it("429 connections: one client past MAX_CONNECTIONS_PER_CLIENT over two channels", async () => {
    const one = envWith({ MAX_CONNECTIONS_PER_CLIENT: "1" });
    const before = await scrapeMetrics(one);
    const ip = { "cf-connecting-ip": freshIp(), upgrade: "websocket" };
    const first = await callAndWait(`/v1/subscribe/public:counted.${uniq()}`, { headers: ip }, one);
    expect(first.status).toBe(101);
    first.webSocket?.accept();
    const second = await callAndWait(`/v1/subscribe/public:counted.${uniq()}`, { headers: ip }, one);
    expect(second.status).toBe(429);
    expect(grown(before, await scrapeMetrics(one))[refusals("connections")]).toBe(1);
    first.webSocket?.close();
  });

  it("admin-auth past its budget", async () => {
    const tight = envWith({ ADMIN_AUTH_RATE: "1/h", ADMIN_AUTH_BURST: "1" });
    const before = await scrapeMetrics(tight);
    const ip = { "cf-connecting-ip": "192.0.2.78", authorization: "Bearer wrong" };
    expect((await callAndWait("/v1/admin/throttle/*", { headers: ip }, tight)).status).toBe(401);
    expect((await callAndWait("/v1/admin/throttle/*", { headers: ip }, tight)).status).toBe(429);
    const grew = grown(before, await scrapeMetrics(tight));
    expect(grew).toMatchObject({ [refusals("unauthenticated")]: 1, [refusals("admin-auth")]: 1 });
  });
});
