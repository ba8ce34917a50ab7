/**
 * The read budget per client IP (docs/api.md, "Bounds"): history and token-less subscribes are charged to
 * read:<ip>, 429 with bucket read past it; clients without an IP share one budget, an IPv6 /64 is one client.
 */
import { describe, expect, it } from "vitest";
import { adminHeaders, callAndWait, envWith, freshIp, peekBucket, uniq } from "../../support/helpers";
import { accessToken, closeQuietly, history, sse, ws } from "../../support/raw-requests";

describe("read budget per client IP", () => {
  it("charges every history request to read:<ip>, token or not, and answers 429 with bucket read", async () => {
    const e = envWith({ READ_RATE: "3/h", READ_BURST: "" });
    const ch = `private:bound.x.${uniq()}`;
    const sub = uniq("reader");
    const token = await accessToken(sub);
    const ip = freshIp();
    const first = await history(e, ch, ip, token);
    expect(first.status).toBe(200);
    expect(first.headers.get("RateLimit-Policy")).toBe('"read";q=3;w=3600');
    expect(first.headers.get("RateLimit")).toMatch(/^"read";r=2;t=\d+$/);
    expect((await history(e, ch, ip, token)).status).toBe(200);
    // An anonymous read of a private channel is still a read: charged, then refused.
    expect((await history(e, ch, ip)).status).toBe(401);
    const denied = await history(e, ch, ip, token);
    expect(denied.status).toBe(429);
    expect(await denied.json()).toEqual({
      code: "resource_exhausted",
      msg: "read rate limit exceeded",
      meta: { code: "RATE_LIMITED", bucket: "read", retry_after_ms: expect.stringMatching(/^\d+$/) },
    });
    expect(Number(denied.headers.get("Retry-After"))).toBeGreaterThanOrEqual(1);
    expect(denied.headers.get("RateLimit")).toMatch(/^"read";r=0;t=\d+$/);
    // Another client's reads, and the reader's subject budget, are untouched.
    expect((await history(e, ch, freshIp(), token)).status).toBe(200);
    expect(await peekBucket(`subscribe:${sub}`)).toBeNull();
  });

  it("charges WebSocket and SSE subscribes without a token to read:<ip>, before any upgrade", async () => {
    const e = envWith({ READ_RATE: "2/h", READ_BURST: "", SUBSCRIBE_RATE: "5/h", SUBSCRIBE_BURST: "" });
    const ch = `public:bound.${uniq()}`;
    const ip = freshIp();
    const first = await ws(e, ch, { "cf-connecting-ip": ip });
    expect(first.status).toBe(101);
    expect(first.headers.get("RateLimit")).toMatch(/^"read";r=1;t=\d+$/);
    closeQuietly(first);
    const second = await sse(e, ch, { "cf-connecting-ip": ip });
    expect(second.status).toBe(200);
    closeQuietly(second);
    const denied = await ws(e, ch, { "cf-connecting-ip": ip });
    expect(denied.status).toBe(429);
    expect(denied.webSocket).toBeNull();
    expect(await denied.json()).toMatchObject({ msg: "read rate limit exceeded", meta: { bucket: "read" } });
    expect((await sse(e, ch, { "cf-connecting-ip": ip })).status).toBe(429);
    // A verified subscriber from the same IP is charged to its own subject, not to the spent read budget.
    const sub = uniq("verified");
    const own = await sse(e, ch, { "cf-connecting-ip": ip, authorization: `Bearer ${await accessToken(sub)}` });
    expect(own.status).toBe(200);
    expect(own.headers.get("RateLimit")).toMatch(/^"subscribe";r=4;t=\d+$/);
    closeQuietly(own);
    const other = await sse(e, ch, { "cf-connecting-ip": freshIp() });
    expect(other.status).toBe(200);
    closeQuietly(other);
  });

  it("shares read:unknown without CF-Connecting-IP, and counts an IPv6 /64 and a mapped IPv4 as one client", async () => {
    // Burst 3: both reads of one client are charged to its bucket (too small for a spare lease).
    const e = envWith({ READ_RATE: "3/h", READ_BURST: "" });
    const ch = `public:bound.${uniq()}`;
    expect((await history(e, ch, null)).status).toBe(200);
    expect(await peekBucket("read:unknown")).not.toBeNull();
    const block = `2001:db8:${Math.floor(Math.random() * 0xffff).toString(16)}:7`;
    expect((await history(e, ch, `${block}::1`)).status).toBe(200);
    expect((await history(e, ch, `${block}:0:0:0:abcd`)).status).toBe(200);
    expect((await peekBucket(`read:${block}::/64`))?.tokens).toBeGreaterThanOrEqual(1);
    expect((await peekBucket(`read:${block}::/64`))?.tokens).toBeLessThan(1.5);
    const v4 = freshIp();
    expect((await history(e, ch, `::ffff:${v4}`)).status).toBe(200);
    expect((await history(e, ch, v4)).status).toBe(200);
    expect((await peekBucket(`read:${v4}`))?.tokens).toBeGreaterThanOrEqual(1);
    expect((await peekBucket(`read:${v4}`))?.tokens).toBeLessThan(1.5);
  });

  it("is listed in the manifest and counted in the metrics under bucket read", async () => {
    const e = envWith({ READ_RATE: "1/h", READ_BURST: "" });
    const manifest = (await (await callAndWait("/v1/manifest", {}, e)).json()) as {
      rate_limits: Record<string, unknown>;
    };
    expect(manifest.rate_limits.read).toEqual({ rate: 1, per: "1h", burst: 1 });
    const defaults = (await (await callAndWait("/v1/manifest", {})).json()) as typeof manifest;
    expect(defaults.rate_limits.read).toEqual({ rate: 20, per: "1s", burst: 40 });

    const scrape = async () => (await callAndWait("/metrics", { headers: adminHeaders() }, e)).text();
    const value = (text: string, series: string) =>
      Number(
        text
          .split("\n")
          .find((l) => l.startsWith(`${series} `))
          ?.split(" ")[1] ?? Number.NaN,
      );
    const before = await scrape();
    const ip = freshIp();
    const ch = `public:bound.${uniq()}`;
    expect((await history(e, ch, ip)).status).toBe(200);
    expect((await history(e, ch, ip)).status).toBe(429);
    const after = await scrape();
    const d = (s: string) => value(after, s) - value(before, s);
    expect(d('floodgate_rate_limit_decisions_total{bucket="read",result="allowed"}')).toBe(1);
    expect(d('floodgate_rate_limit_decisions_total{bucket="read",result="denied"}')).toBe(1);
    expect(d('floodgate_rate_limit_decisions_total{bucket="subscribe",result="allowed"}')).toBe(0);
  });
});
