/**
 * Rate-limit gates over HTTP: order, keys, headers, 429 bodies, overrides, failure, deny cache.
 */
import { describe, expect, it, vi } from "vitest";
import { LIMITER_BATCHING, LimiterGate } from "../../src/limiter/limiter-gate";
import { LimiterShard } from "../../src/limiter/limiter-shard";
import { signToken } from "../../src/worker/auth/tokens";
import {
  adminHeaders,
  callAndWait,
  envWith,
  freshIp,
  mint,
  peekBucket,
  perKey,
  uniq,
  withFailing,
} from "../support/helpers";

const SECRET = "test-token-secret-0123456789abcdef";
const peek = peekBucket;

function publishWith(
  customEnv: Env,
  ch: string,
  token: string,
  body = '{"x":1}',
  headers: Record<string, string> = {},
) {
  return callAndWait(
    `/v1/publish/${ch}`,
    { method: "POST", headers: { authorization: `Bearer ${token}`, ...headers }, body },
    customEnv,
  );
}

/**
 * A limiter backend whose first call never answers, like a request whose context died mid-call; later
 * calls grant every request and report `remaining` tokens left.
 */
function firstCallHangs(remaining: number) {
  const counter = { calls: 0 };
  const backend = perKey((_key, _limit, count) => {
    counter.calls++;
    if (counter.calls === 1) return new Promise<never>(() => {});
    return Promise.resolve({ granted: count, remaining, retryAfterMs: 0, fullInMs: 100 });
  });
  return { backend, counter };
}

async function accessToken(sub: string, over: Record<string, unknown> = {}) {
  const now = Math.floor(Date.now() / 1000);
  return signToken(
    {
      sub,
      typ: "access",
      chs: ["public:gate.*", "private:gate.x.*"],
      scp: ["publish", "subscribe"],
      iat: now,
      exp: now + 300,
      jti: uniq(),
      ...over,
    },
    SECRET,
  );
}

describe("publish gate", () => {
  it("admits burst then answers 429 with the API's body and headers", async () => {
    const e = envWith({ PUBLISH_RATE: "3/h", PUBLISH_BURST: "" });
    const sub = uniq("s");
    const t = await accessToken(sub);
    const ch = `public:gate.${uniq()}`;
    const ok = [];
    for (let i = 0; i < 3; i++) ok.push(await publishWith(e, ch, t));
    expect(ok.map((r) => r.status)).toEqual([200, 200, 200]);
    expect(ok[0]?.headers.get("RateLimit-Policy")).toBe('"publish";q=3;w=3600');
    expect(ok.map((r) => r.headers.get("RateLimit"))).toEqual([
      '"publish";r=2;t=1200',
      '"publish";r=1;t=2400',
      '"publish";r=0;t=3600',
    ]);
    const denied = await publishWith(e, ch, t);
    expect(denied.status).toBe(429);
    const body = (await denied.json()) as { code: string; msg: string; meta: Record<string, string> };
    expect(body).toMatchObject({
      code: "resource_exhausted",
      msg: "publish rate limit exceeded",
      meta: { code: "RATE_LIMITED", bucket: "publish" },
    });
    expect(body.meta.retry_after_ms).toMatch(/^\d+$/);
    const retryMs = Number(body.meta.retry_after_ms);
    expect(retryMs).toBeGreaterThan(1_190_000);
    expect(retryMs).toBeLessThanOrEqual(1_200_000);
    expect(Number(denied.headers.get("Retry-After")) * 1000).toBeGreaterThanOrEqual(retryMs);
    expect(denied.headers.get("RateLimit")).toMatch(/^"publish";r=0;t=\d+$/);
    expect(denied.headers.get("RateLimit-Policy")).toBe('"publish";q=3;w=3600');
    expect((await peek(`publish:${sub}`))?.tokens).toBeLessThan(0.01);
  });

  it("never charges invalid requests: bad channel, bad token, 403, 413, bad JSON, bad idempotency key", async () => {
    const e = envWith({ PUBLISH_RATE: "1/h", PUBLISH_BURST: "" });
    const sub = uniq("inv");
    const t = await accessToken(sub);
    expect((await publishWith(e, "public:BAD", t)).status).toBe(400);
    expect((await publishWith(e, `public:gate.${uniq()}`, `${t}x`)).status).toBe(401);
    expect((await publishWith(e, `public:elsewhere.${uniq()}`, t)).status).toBe(403);
    expect((await publishWith(e, `public:gate.${uniq()}`, await accessToken(sub, { scp: ["subscribe"] }))).status).toBe(
      403,
    );
    expect((await publishWith(e, `public:gate.${uniq()}`, t, JSON.stringify("x".repeat(40_000)))).status).toBe(413);
    expect((await publishWith(e, `public:gate.${uniq()}`, t, "{bad")).status).toBe(400);
    expect((await publishWith(e, `public:gate.${uniq()}`, t, "1", { "idempotency-key": "" })).status).toBe(400);
    expect(await peek(`publish:${sub}`)).toBeNull();
    // The one valid request is charged.
    expect((await publishWith(e, `public:gate.${uniq()}`, t)).status).toBe(200);
    expect(await peek(`publish:${sub}`)).not.toBeNull();
  });

  it("uses the per-channel key and rule, and the token's rl override over both", async () => {
    const e = envWith({
      PUBLISH_RATE: "100/s",
      PER_CHANNEL_PUBLISH_LIMITS: JSON.stringify({ "public:gate.*": "1/h", "public:**": "100/s" }),
    });
    const sub = uniq("pc");
    const ch = `public:gate.${uniq()}`;
    const t = await accessToken(sub);
    expect((await publishWith(e, ch, t)).status).toBe(200);
    expect((await publishWith(e, ch, t)).status).toBe(429);
    expect(await peek(`publish-channel:public:gate.*:${sub}`)).not.toBeNull();
    expect(await peek(`publish:${sub}`)).toBeNull();
    // rl override: 2 per hour, on the same per-channel key.
    const sub2 = uniq("rl");
    const pair = await mint({ sub: sub2, channels: ["public:gate.*"], rl: { rate: 2, per: "1h", burst: 2 } });
    const statuses = [];
    for (let i = 0; i < 3; i++) statuses.push((await publishWith(e, ch, pair.access_token)).status);
    expect(statuses).toEqual([200, 200, 429]);
  });

  it("the rl override survives refresh", async () => {
    const e = envWith({ PUBLISH_RATE: "100/s" });
    const pair = await mint({ sub: uniq("rf"), channels: ["public:gate.*"], rl: "1/h" });
    const ch = `public:gate.${uniq()}`;
    expect((await publishWith(e, ch, pair.access_token)).status).toBe(200);
    const res = await callAndWait("/v1/tokens/refresh", {
      method: "POST",
      headers: { "cf-connecting-ip": freshIp() },
      body: JSON.stringify({ refresh_token: pair.refresh_token }),
    });
    const next = (await res.json()) as { access_token: string };
    expect((await publishWith(e, ch, next.access_token)).status).toBe(429);
  });

  it("a disabled budget charges nothing and sends no RateLimit headers", async () => {
    const e = envWith({ PUBLISH_RATE: "" });
    const sub = uniq("off");
    const res = await publishWith(e, `public:gate.${uniq()}`, await accessToken(sub));
    expect(res.status).toBe(200);
    expect(res.headers.get("RateLimit")).toBeNull();
    expect(await peek(`publish:${sub}`)).toBeNull();
  });
});

describe("subscribe gate", () => {
  const sse = (customEnv: Env, ch: string, token?: string) =>
    callAndWait(
      `/v1/subscribe/${ch}${token ? `?token=${token}` : ""}`,
      { headers: { accept: "text/event-stream" } },
      customEnv,
    );

  it("charges a token that does not verify to the client IP's read budget, never to the sub it claims", async () => {
    const e = envWith({ SUBSCRIBE_RATE: "1/h", SUBSCRIBE_BURST: "", READ_RATE: "1/h", READ_BURST: "" });
    const sub = uniq("forged");
    const forged = await signToken(
      { sub, typ: "access", chs: ["private:gate.x.*"], scp: ["subscribe"], iat: 0, exp: 9_999_999_999, jti: "j" },
      "not-the-secret-not-the-secret-not-the-secret",
    );
    const ch = `private:gate.x.${uniq()}`;
    const ip = freshIp();
    const sseFrom = (token: string) =>
      callAndWait(
        `/v1/subscribe/${ch}?token=${token}`,
        { headers: { accept: "text/event-stream", "cf-connecting-ip": ip } },
        e,
      );
    expect((await sseFrom(forged)).status).toBe(401);
    const denied = await sseFrom(forged);
    expect(denied.status).toBe(429);
    expect(await denied.json()).toMatchObject({ meta: { bucket: "read" } });
    expect(await peek(`read:${ip}`)).not.toBeNull();
    expect(await peek(`subscribe:${sub}`)).toBeNull();
  });

  it("answers 429 before any upgrade, and anonymous subscribers are not charged to a subject", async () => {
    const e = envWith({ SUBSCRIBE_RATE: "1/h", SUBSCRIBE_BURST: "" });
    const sub = uniq("ws");
    const t = await accessToken(sub);
    const ch = `public:gate.${uniq()}`;
    const first = await callAndWait(`/v1/subscribe/${ch}?token=${t}`, { headers: { upgrade: "websocket" } }, e);
    expect(first.status).toBe(101);
    expect(first.headers.get("RateLimit")).toBe('"subscribe";r=0;t=3600');
    first.webSocket?.accept();
    first.webSocket?.close();
    const second = await callAndWait(`/v1/subscribe/${ch}?token=${t}`, { headers: { upgrade: "websocket" } }, e);
    expect(second.status).toBe(429);
    expect(second.webSocket).toBeNull();
    expect(await second.json()).toMatchObject({ msg: "subscribe rate limit exceeded", meta: { bucket: "subscribe" } });
    for (let i = 0; i < 3; i++) {
      const anon = await sse(e, ch);
      expect(anon.status).toBe(200);
      await anon.body?.cancel();
    }
  });

  it("uses the per-channel subscribe rule and key", async () => {
    const e = envWith({
      SUBSCRIBE_RATE: "100/s",
      PER_CHANNEL_SUBSCRIBE_LIMITS: JSON.stringify({ "public:gate.*": "1/h" }),
    });
    const sub = uniq("psc");
    const ch = `public:gate.${uniq()}`;
    const t = await accessToken(sub);
    const r1 = await sse(e, ch, t);
    expect(r1.status).toBe(200);
    await r1.body?.cancel();
    expect((await sse(e, ch, t)).status).toBe(429);
    expect(await peek(`subscribe-channel:public:gate.*:${sub}`)).not.toBeNull();
  });
});

describe("token-issue gate", () => {
  const mintFrom = (e: Env, ip: string | null, auth = adminHeaders()) =>
    callAndWait(
      "/v1/tokens",
      {
        method: "POST",
        headers: { ...auth, ...(ip ? { "cf-connecting-ip": ip } : {}) },
        body: JSON.stringify({ sub: "a", channels: ["public:a.b"] }),
      },
      e,
    );

  it("is keyed by client IP and charged before the admin bearer is checked", async () => {
    const e = envWith({ TOKEN_ISSUE_RATE: "2/h", TOKEN_ISSUE_BURST: "" });
    const ip = freshIp();
    expect((await mintFrom(e, ip, { authorization: "Bearer wrong" })).status).toBe(401);
    expect((await mintFrom(e, ip)).status).toBe(201);
    const denied = await mintFrom(e, ip);
    expect(denied.status).toBe(429);
    expect(await denied.json()).toMatchObject({
      msg: "token issue rate limit exceeded",
      meta: { bucket: "token-issue" },
    });
    expect(denied.headers.get("RateLimit-Policy")).toBe('"token-issue";q=2;w=3600');
    expect((await mintFrom(e, freshIp())).status).toBe(201);
  });

  it("requests without CF-Connecting-IP share token-issue:unknown", async () => {
    const e = envWith({ TOKEN_ISSUE_RATE: "1000/h" });
    expect((await mintFrom(e, null)).status).toBe(201);
    expect(await peek("token-issue:unknown")).not.toBeNull();
  });
});

describe("limiter failure", () => {
  it("fails closed with 500, no backend text, and counts the error", async () => {
    const e = envWith({ PUBLISH_RATE: "10/s" });
    const t = await accessToken(uniq("fail"));
    const res = await withFailing(LimiterShard, "decide", "SQLITE_FULL: secret backend detail", () =>
      publishWith(e, `public:gate.${uniq()}`, t),
    );
    expect(res.status).toBe(500);
    const text = await res.text();
    expect(JSON.parse(text)).toEqual({ code: "internal", msg: "rate limiter unavailable", meta: { code: "INTERNAL" } });
    expect(text).not.toMatch(/SQLITE|secret/);
    const metrics = await (await callAndWait("/metrics", { headers: adminHeaders() }, e)).text();
    expect(metrics).toMatch(/floodgate_rate_limit_errors_total\{bucket="publish"\} [1-9]/);
  });
});

describe("deny cache", () => {
  it("answers repeat denials without an object call until the deny time, and never admits", async () => {
    let now = 1000;
    let calls = 0;
    let tokens = 1;
    const backend = perKey(async (_key, _limit, count) => {
      calls++;
      const granted = Math.min(count, tokens);
      tokens -= granted;
      return { granted, remaining: 0, retryAfterMs: 500, fullInMs: 500 };
    });
    const decisions: boolean[] = [];
    const gate = new LimiterGate(backend, { decision: (_b, a) => decisions.push(a), error: () => {} }, () => now);
    const limit = { rate: 2, perMs: 1000, burst: 1 };
    await gate.check("publish", "k", limit);
    for (let i = 0; i < 100; i++) {
      now += 4; // 400 ms pass in total, still before the deny time
      await expect(gate.check("publish", "k", limit)).rejects.toMatchObject({ kind: "rate_limited" });
    }
    expect(calls).toBe(2); // one admit, one real denial; 99 answered from the cache
    now = 1504; // the deny time (first denial at 1004 + 500 ms): the object decides again
    await expect(gate.check("publish", "k", limit)).rejects.toMatchObject({ kind: "rate_limited" });
    expect(calls).toBe(3);
    expect(decisions.filter(Boolean)).toHaveLength(1);
  });

  it("coalesces concurrent requests for one key into few calls, admitting exactly what the object grants", async () => {
    let calls = 0;
    let tokens = 10;
    const sizes: number[] = [];
    const backend = perKey(async (_key, _limit, count) => {
      calls++;
      sizes.push(count);
      await new Promise((r) => setTimeout(r, 5)); // an object round trip
      const granted = Math.min(count, tokens);
      tokens -= granted;
      return { granted, remaining: tokens, retryAfterMs: tokens > 0 ? 0 : 100, fullInMs: 1000 };
    });
    const gate = new LimiterGate(backend, { decision: () => {}, error: () => {} });
    const limit = { rate: 10, perMs: 1000, burst: 10 };
    const first = gate.check("publish", "k", limit);
    await new Promise((r) => setTimeout(r, 1)); // its call is now in flight
    const rest = Array.from({ length: 29 }, () => gate.check("publish", "k", limit));
    const results = await Promise.allSettled([first, ...rest]);
    const allowed = results.filter((r) => r.status === "fulfilled");
    expect(allowed).toHaveLength(10);
    expect(results.slice(0, 10).every((r) => r.status === "fulfilled")).toBe(true); // arrival order
    expect(calls).toBe(2); // the first request alone, then the 29 that queued behind it
    expect(sizes).toEqual([1, 29]);
    // Requests of the same tick with nothing in flight go together at once.
    await Promise.allSettled(Array.from({ length: 7 }, () => gate.check("publish", "k2", limit)));
    expect(sizes).toEqual([1, 29, 7]);
    // Each admitted request reports the tokens left after it, so the headers count down.
    const remaining = allowed.map((r) => (r as PromiseFulfilledResult<Record<string, string>>).value.RateLimit);
    expect(remaining).toEqual(Array.from({ length: 10 }, (_, i) => `"publish";r=${9 - i};t=1`));
  });

  it("a batch stuck behind a call that never answers is sent after the stall time", async () => {
    vi.useFakeTimers();
    try {
      const { backend, counter } = firstCallHangs(5);
      const gate = new LimiterGate(backend, { decision: () => {}, error: () => {} });
      const limit = { rate: 10, perMs: 1000, burst: 10 };
      void gate.check("publish", "k", limit);
      await vi.advanceTimersByTimeAsync(1);
      const second = gate.check("publish", "k", limit);
      await vi.advanceTimersByTimeAsync(LIMITER_BATCHING.stallMs - 10);
      expect(counter.calls).toBe(1);
      await vi.advanceTimersByTimeAsync(20);
      expect(counter.calls).toBe(2);
      await expect(second).resolves.toMatchObject({ RateLimit: '"publish";r=5;t=1' });
    } finally {
      vi.useRealTimers();
    }
  });

  it("followers whose leader never gets an answer ask the object themselves", async () => {
    vi.useFakeTimers();
    try {
      const { backend, counter } = firstCallHangs(3); // the leader's client disconnects mid-call
      const gate = new LimiterGate(backend, { decision: () => {}, error: () => {} });
      const limit = { rate: 10, perMs: 1000, burst: 10 };
      void gate.check("publish", "k", limit); // the leader, lost
      const followers = Array.from({ length: 4 }, () => gate.check("publish", "k", limit));
      await vi.advanceTimersByTimeAsync(LIMITER_BATCHING.patienceMs - 10);
      expect(counter.calls).toBe(1);
      await vi.advanceTimersByTimeAsync(20);
      expect(counter.calls).toBe(5);
      for (const f of followers) await expect(f).resolves.toMatchObject({ RateLimit: '"publish";r=3;t=1' });
    } finally {
      vi.useRealTimers();
    }
  });

  it("a failing batch fails every request in it closed", async () => {
    const errors: string[] = [];
    const gate = new LimiterGate(
      {
        async charge() {
          throw new Error("backend detail");
        },
      },
      { decision: () => {}, error: (b) => errors.push(b) },
    );
    const limit = { rate: 10, perMs: 1000, burst: 10 };
    const results = await Promise.allSettled(Array.from({ length: 5 }, () => gate.check("publish", "k", limit)));
    for (const r of results) {
      expect(r).toMatchObject({
        status: "rejected",
        reason: { kind: "internal", message: "rate limiter unavailable" },
      });
    }
    expect(errors).toHaveLength(5);
  });

  it("200 concurrent publishes from one subject on burst 50 get exactly 50 through, over HTTP", async () => {
    const e = envWith({ PUBLISH_RATE: "50/h", PUBLISH_BURST: "" });
    const t = await accessToken(uniq("burst"));
    const ch = `public:gate.${uniq()}`;
    const statuses = await Promise.all(Array.from({ length: 200 }, () => publishWith(e, ch, t).then((r) => r.status)));
    expect(statuses.filter((s) => s === 200)).toHaveLength(50);
    expect(statuses.filter((s) => s === 429)).toHaveLength(150);
  });

  it("a flood from one subject costs far fewer object calls than requests, over HTTP", async () => {
    const e = envWith({ PUBLISH_RATE: "1/h", PUBLISH_BURST: "" });
    const t = await accessToken(uniq("flood"));
    const ch = `public:gate.${uniq()}`;
    // The metrics object is the file's: other tests' hits are counted before this one's.
    const hits = async () => {
      const text = await (await callAndWait("/metrics", { headers: adminHeaders() }, e)).text();
      return Number(text.match(/^floodgate_rate_limit_deny_cache_hits_total\{bucket="publish"\} (\d+)$/m)?.[1]);
    };
    const hitsBefore = await hits();
    const { services } = await import("../../src/worker/services");
    const callsBefore = services(e).gate.calls;
    const statuses = [];
    for (let i = 0; i < 50; i++) statuses.push((await publishWith(e, ch, t)).status);
    expect(statuses.filter((s) => s === 200)).toHaveLength(1);
    expect(statuses.filter((s) => s === 429)).toHaveLength(49);
    expect(services(e).gate.calls - callsBefore).toBe(2);
    expect((await hits()) - hitsBefore).toBe(48);
  });
});
