/**
 * Guessing the admin token is budgeted (docs/security.md, "Threat model"): every failed admin bearer is
 * charged to admin-auth:<ip> before it is compared, past the burst even the right one answers 429, and
 * good requests are never charged.
 */
import { describe, expect, it } from "vitest";
import { services } from "../../../src/worker/services";
import { ADMIN, callAndWait, envWith, peekBucket } from "../../support/helpers";

/**
 * The shipped burst of 20 with one token an hour instead of 10 a minute, so no token comes back while
 * a test runs, however slow the machine (the shipped figures are checked in test/settings/configuration.test.ts).
 */
const SLOW_REFILL = envWith({ ADMIN_AUTH_RATE: "1/h", ADMIN_AUTH_BURST: "20" });

/**
 * A client address of its own: a random IPv6 /64, so the buckets these tests empty never belong to
 * the addresses other test files take from freshIp() (storage is shared by the files of one run).
 */
function freshIp(): string {
  const hex = () => Math.floor(Math.random() * 0x10000).toString(16);
  return `2001:db8:${hex()}:${hex()}::1`;
}

/** An admin request from `ip` with `bearer` (null: no Authorization header). */
function adminCall(path: string, ip: string, bearer: string | null, init: RequestInit = {}) {
  const headers = {
    "cf-connecting-ip": ip,
    "content-type": "application/json",
    ...(bearer === null ? {} : { authorization: `Bearer ${bearer}` }),
  };
  return callAndWait(path, { ...init, headers }, SLOW_REFILL);
}

/** Forgets this isolate's cached denials, so the next answer comes from the bucket's shard. */
function forgetDenials(): void {
  (services(SLOW_REFILL).gate as unknown as { deny: { clear(): void } }).deny.clear();
}

describe("guessing the admin token is budgeted (admin-auth:<ip>, burst 20)", () => {
  it("300 wrong bearers in a row: 401 for the first 20, then 429 naming the bucket, with Retry-After", async () => {
    const ip = freshIp();
    const statuses: number[] = [];
    let denial: Response | null = null;
    // Enough past the burst to be a flood, few enough to stay well inside the test's time on a busy machine.
    for (let i = 0; i < 300; i++) {
      const res = await adminCall("/metrics", ip, `wrong-guess-${i}-padding`);
      statuses.push(res.status);
      if (res.status === 429 && !denial) denial = res;
      else await res.body?.cancel();
    }
    expect(statuses.slice(0, 20)).toEqual(Array(20).fill(401));
    expect(statuses.slice(20)).toEqual(Array(280).fill(429));
    expect(denial).not.toBeNull();
    const res = denial as Response;
    expect(await res.json()).toEqual({
      code: "resource_exhausted",
      msg: "admin auth rate limit exceeded",
      meta: { code: "RATE_LIMITED", bucket: "admin-auth", retry_after_ms: expect.any(String) },
    });
    // One an hour: the next token is back within the hour, not before most of it has passed.
    const retry = Number(res.headers.get("retry-after"));
    expect(retry).toBeGreaterThan(3000);
    expect(retry).toBeLessThanOrEqual(3600);
    const bucket = await peekBucket(`admin-auth:${ip.replace("::1", "::/64")}`);
    expect(bucket?.tokens ?? 20).toBeLessThan(1);
  });

  it("100 bearers at once, one in five the right one: at most the burst of 20 is compared, every other one 429", async () => {
    const ip = freshIp();
    // Only a compared bearer can answer 200 or 401, so a right one among them shows whether it was
    // compared; a look at the bucket that holds nothing lets every one of them through.
    const answers = await Promise.all(
      Array.from({ length: 100 }, (_, i) => adminCall("/metrics", ip, i % 5 === 4 ? ADMIN : `concurrent-guess-${i}-x`)),
    );
    const statuses = answers.map((r) => r.status);
    await Promise.all(answers.map((r) => r.body?.cancel()));
    const count = (status: number) => statuses.filter((s) => s === status).length;
    expect(count(200) + count(401) + count(429)).toBe(100);
    expect(count(401)).toBeLessThanOrEqual(20);
    expect(count(200) + count(401)).toBeLessThanOrEqual(20);
    expect(count(429)).toBeGreaterThanOrEqual(80);
    // The right bearers that got through gave their tokens back; the wrong ones kept theirs.
    const bucket = await peekBucket(`admin-auth:${ip.replace("::1", "::/64")}`);
    expect(bucket?.tokens).toBeCloseTo(20 - count(401), 2);
  });

  it("the right bearer when the bucket is empty answers 429 and gives nothing back", async () => {
    const ip = freshIp();
    for (let i = 0; i < 20; i++) expect((await adminCall("/metrics", ip, `wrong-guess-${i}-padding`)).status).toBe(401);
    forgetDenials();
    expect((await adminCall("/metrics", ip, ADMIN)).status).toBe(429);
    const bucket = await peekBucket(`admin-auth:${ip.replace("::1", "::/64")}`);
    expect(bucket?.tokens ?? 20).toBeLessThan(1);
  });

  it("once exhausted, even the right bearer answers 429: it is refused before it is compared", async () => {
    const ip = freshIp();
    for (let i = 0; i < 20; i++) expect((await adminCall("/metrics", ip, null)).status).toBe(401);
    expect((await adminCall("/metrics", ip, ADMIN)).status).toBe(429);
    // Not only this isolate's cached denial: the bucket's shard says so too (another isolate's view).
    forgetDenials();
    expect((await adminCall("/v1/admin/overview", ip, ADMIN)).status).toBe(429);
    // Minting with the admin bearer is refused the same way.
    const mintRes = await adminCall("/v1/tokens", ip, ADMIN, {
      method: "POST",
      body: JSON.stringify({ sub: "a", channels: ["public:a.b"] }),
    });
    expect(mintRes.status).toBe(429);
    expect(await mintRes.json()).toMatchObject({ meta: { bucket: "admin-auth" } });
    // Another client is not affected.
    expect((await adminCall("/metrics", freshIp(), ADMIN)).status).toBe(200);
  });

  it("counts every kind of failure: no header, a malformed header, a wrong bearer, on every admin route", async () => {
    const ip = freshIp();
    const failures = [
      () => adminCall("/metrics", ip, null),
      () =>
        callAndWait(
          "/v1/admin/throttle/*",
          { headers: { "cf-connecting-ip": ip, authorization: "Basic abc" } },
          SLOW_REFILL,
        ),
      () => adminCall("/v1/admin/overview", ip, "not-the-admin-token"),
      () =>
        adminCall("/v1/tokens", ip, "not-the-admin-token", {
          method: "POST",
          body: JSON.stringify({ sub: "a", channels: ["public:a.b"] }),
        }),
    ];
    const seen: number[] = [];
    for (let i = 0; i < 24; i++) seen.push((await (failures[i % failures.length] as () => Promise<Response>)()).status);
    expect(seen.filter((s) => s === 429)).toHaveLength(4);
    expect(seen.slice(20)).toEqual([429, 429, 429, 429]);
  });

  it("good requests are never charged", async () => {
    const ip = freshIp();
    for (let i = 0; i < 30; i++) {
      const res = await adminCall(i % 2 ? "/metrics" : "/v1/admin/overview", ip, ADMIN);
      expect(res.status).toBe(200);
      await res.body?.cancel();
    }
    const bucket = await peekBucket(`admin-auth:${ip.replace("::1", "::/64")}`);
    expect(bucket?.tokens ?? 20).toBe(20);
    // And the whole burst of failures is still there after them.
    for (let i = 0; i < 20; i++) expect((await adminCall("/metrics", ip, "wrong-admin-token-x")).status).toBe(401);
    expect((await adminCall("/metrics", ip, "wrong-admin-token-x")).status).toBe(429);
  });
});
