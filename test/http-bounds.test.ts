/**
 * Bounds over HTTP and WebSocket (docs/api.md, "Bounds"; docs/security.md): the read budget per client
 * IP, verifying a token before charging its subject, no unusable tokens, sessions that end and chains
 * revoked on reuse, strong secrets, tokens kept out of URLs, and security headers. Each test also
 * checks that what should not change did not (another IP's or subject's budget, a token's next use).
 */
import { runDurableObjectAlarm, runInDurableObject } from "cloudflare:test";
import { env } from "cloudflare:workers";
import { FloodgateClient, type Message, type SocketLike } from "@floodgate/client";
import { describe, expect, it } from "vitest";
import devVarsExample from "../.dev.vars.example?raw";
import { RefreshLedger } from "../src/auth/refresh-ledger";
import { secretProblem } from "../src/auth/secrets";
import { base64UrlEncode, MAX_TOKEN_LENGTH, signToken } from "../src/auth/tokens";
import {
  ADMIN,
  adminHeaders,
  BASE,
  callAndWait,
  envWith,
  freshIp,
  mint,
  peekBucket,
  publishTo,
  readSse,
  uniq,
  withFailing,
} from "./helpers";

const SECRET = "test-token-secret-0123456789abcdef";
const peek = peekBucket;
const decode = (t: string) =>
  JSON.parse(atob((t.split(".")[1] as string).replace(/-/g, "+").replace(/_/g, "/"))) as Record<string, unknown>;

async function accessToken(sub: string, chs = ["public:bound.*", "private:bound.x.*"]) {
  const now = Math.floor(Date.now() / 1000);
  return signToken(
    { sub, typ: "access", chs, scp: ["publish", "subscribe"], iat: now, exp: now + 300, jti: uniq() },
    SECRET,
  );
}

const history = (e: Env, ch: string, ip: string | null, token?: string) =>
  callAndWait(
    `/v1/history/${ch}`,
    {
      headers: {
        ...(ip ? { "cf-connecting-ip": ip } : {}),
        ...(token ? { authorization: `Bearer ${token}` } : {}),
      },
    },
    e,
  );

const sse = (e: Env, ch: string, headers: Record<string, string>) =>
  callAndWait(`/v1/subscribe/${ch}`, { headers: { accept: "text/event-stream", ...headers } }, e);

const ws = (e: Env, ch: string, headers: Record<string, string>) =>
  callAndWait(`/v1/subscribe/${ch}`, { headers: { upgrade: "websocket", ...headers } }, e);

function closeQuietly(res: Response): void {
  if (res.webSocket) {
    res.webSocket.accept();
    res.webSocket.close();
  } else void res.body?.cancel();
}

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
    expect(await peek(`subscribe:${sub}`)).toBeNull();
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
    expect(await peek("read:unknown")).not.toBeNull();
    const block = `2001:db8:${Math.floor(Math.random() * 0xffff).toString(16)}:7`;
    expect((await history(e, ch, `${block}::1`)).status).toBe(200);
    expect((await history(e, ch, `${block}:0:0:0:abcd`)).status).toBe(200);
    expect((await peek(`read:${block}::/64`))?.tokens).toBeGreaterThanOrEqual(1);
    expect((await peek(`read:${block}::/64`))?.tokens).toBeLessThan(1.5);
    const v4 = freshIp();
    expect((await history(e, ch, `::ffff:${v4}`)).status).toBe(200);
    expect((await history(e, ch, v4)).status).toBe(200);
    expect((await peek(`read:${v4}`))?.tokens).toBeGreaterThanOrEqual(1);
    expect((await peek(`read:${v4}`))?.tokens).toBeLessThan(1.5);
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

describe("verify before charging a subject", () => {
  it("a forged token never spends or reveals another subject's budget", async () => {
    const e = envWith({ SUBSCRIBE_RATE: "3/h", SUBSCRIBE_BURST: "", READ_RATE: "100/s" });
    const alice = uniq("alice");
    const ch = `public:bound.${uniq()}`;
    const real = await sse(e, ch, { authorization: `Bearer ${await accessToken(alice)}` });
    expect(real.headers.get("RateLimit")).toMatch(/^"subscribe";r=2;t=\d+$/);
    closeQuietly(real);
    const stored = await peek(`subscribe:${alice}`);
    const claim = base64UrlEncode(new TextEncoder().encode(JSON.stringify({ sub: alice })));
    const badlySigned = await signToken(
      { sub: alice, typ: "access", chs: ["public:bound.*"], scp: ["subscribe"], iat: 0, exp: 9_999_999_999, jti: "j" },
      "someone-elses-secret-someone-elses-secret",
    );
    const ip = freshIp();
    for (const forged of [`x.${claim}.x`, badlySigned]) {
      for (let i = 0; i < 5; i++) {
        const res = await sse(e, ch, { authorization: `Bearer ${forged}`, "cf-connecting-ip": ip });
        expect(res.status).toBe(200);
        // The only budget shown is the requester's own: its IP's reads.
        expect(res.headers.get("RateLimit")).toMatch(/^"read";/);
        expect(res.headers.get("RateLimit-Policy")).toMatch(/^"read";/);
        closeQuietly(res);
      }
    }
    // Private channels refuse the same forgeries with 401, still without touching alice.
    const priv = await ws(e, `private:bound.x.${uniq()}`, {
      authorization: `Bearer x.${claim}.x`,
      "cf-connecting-ip": ip,
    });
    expect(priv.status).toBe(401);
    expect(await peek(`subscribe:${alice}`)).toEqual(stored);
    const again = await sse(e, ch, { authorization: `Bearer ${await accessToken(alice)}` });
    expect(again.headers.get("RateLimit")).toMatch(/^"subscribe";r=1;/);
    closeQuietly(again);
  });

  it("an expired token or a refresh token is not a subject either", async () => {
    const e = envWith({ SUBSCRIBE_RATE: "3/h", SUBSCRIBE_BURST: "", READ_RATE: "100/s" });
    const sub = uniq("stale");
    const now = Math.floor(Date.now() / 1000);
    const base = { sub, chs: ["public:bound.*"], scp: ["subscribe" as const], jti: uniq() };
    const expired = await signToken({ ...base, typ: "access", iat: now - 600, exp: now - 1 }, SECRET);
    const refresh = await signToken({ ...base, typ: "refresh", iat: now, exp: now + 600 }, SECRET);
    for (const t of [expired, refresh]) {
      const res = await sse(e, `public:bound.${uniq()}`, {
        authorization: `Bearer ${t}`,
        "cf-connecting-ip": freshIp(),
      });
      expect(res.headers.get("RateLimit")).toMatch(/^"read";/);
      closeQuietly(res);
    }
    expect(await peek(`subscribe:${sub}`)).toBeNull();
  });
});

describe("no unusable tokens", () => {
  // 199 characters each, about the longest a pattern some channel can match (a channel name is at
  // most 200 characters: a longer pattern is refused as unmatchable before its length matters).
  const longPattern = (i: number) => `public:${String(i).padStart(64, "a")}.${"b".repeat(64)}.${"c".repeat(60)}.*`;

  it("refuses a mint whose token would exceed the size every route accepts, naming the limit", async () => {
    const res = await callAndWait("/v1/tokens", {
      method: "POST",
      headers: adminHeaders({ "cf-connecting-ip": freshIp() }),
      body: JSON.stringify({ sub: uniq("big"), channels: Array.from({ length: 32 }, (_, i) => longPattern(i)) }),
    });
    expect(res.status).toBe(400);
    const body = (await res.json()) as { code: string; msg: string; meta: Record<string, string> };
    expect(body).toMatchObject({
      code: "invalid_argument",
      meta: { code: "INVALID_ARGUMENT", limit: "max_token_length" },
    });
    expect(body.msg).toContain(`${MAX_TOKEN_LENGTH}-character limit`);
    expect(body.meta.max_token_length).toBe(String(MAX_TOKEN_LENGTH));
    // With fewer patterns the pair is issued, and both tokens work.
    const fits = [...Array.from({ length: 20 }, (_, i) => longPattern(i)), "public:bound.*"];
    const ok = await mint({ sub: uniq("fits"), channels: fits });
    expect(ok.refresh_token.length).toBeGreaterThan(MAX_TOKEN_LENGTH / 2);
    expect(ok.refresh_token.length).toBeLessThanOrEqual(MAX_TOKEN_LENGTH);
    expect((await publishTo(`public:bound.${uniq()}`, ok.access_token, { ok: true })).status).toBe(200);
    const refreshed = await callAndWait("/v1/tokens/refresh", {
      method: "POST",
      headers: { "cf-connecting-ip": freshIp() },
      body: JSON.stringify({ refresh_token: ok.refresh_token }),
    });
    expect(refreshed.status).toBe(200);
  });
});

describe("sessions end", () => {
  const refresh = (token: string, e: Env = env) =>
    callAndWait(
      "/v1/tokens/refresh",
      { method: "POST", headers: { "cf-connecting-ip": freshIp() }, body: JSON.stringify({ refresh_token: token }) },
      e,
    );
  /** A refresh token of a chain first minted `ageSeconds` ago, as the Worker itself signs them. */
  const chainToken = (sub: string, ageSeconds: number, sid = uniq("sid")) => {
    const now = Math.floor(Date.now() / 1000);
    return signToken(
      {
        sub,
        typ: "refresh",
        chs: ["public:bound.*"],
        scp: ["subscribe"],
        iat: now - 60,
        exp: now + 3600,
        jti: uniq(),
        ttl: 300,
        sid,
        sst: now - ageSeconds,
      },
      SECRET,
    );
  };

  it("caps a chain at SESSION_TTL after its first mint, through every refresh", async () => {
    const e = envWith({ SESSION_TTL: "2h" });
    const res = await callAndWait(
      "/v1/tokens",
      {
        method: "POST",
        headers: adminHeaders({ "cf-connecting-ip": freshIp() }),
        body: JSON.stringify({ sub: uniq("s"), channels: ["public:bound.*"], refresh_ttl: "7d" }),
      },
      e,
    );
    expect(res.status).toBe(201);
    const pair = (await res.json()) as { refresh_token: string; refresh_expires_at: number };
    const minted = decode(pair.refresh_token);
    expect(pair.refresh_expires_at).toBe((minted.sst as number) + 7200);
    const next = await refresh(pair.refresh_token, e);
    expect(next.status).toBe(200);
    const nextPair = (await next.json()) as { refresh_token: string; refresh_expires_at: number };
    expect(decode(nextPair.refresh_token)).toMatchObject({ sid: minted.sid, sst: minted.sst });
    expect(nextPair.refresh_expires_at).toBe((minted.sst as number) + 7200);

    // A chain started 2h - 100s ago still refreshes, but never past its end; one started 2h ago does not.
    const sub = uniq("old");
    const young = await refresh(await chainToken(sub, 7100), e);
    expect(young.status).toBe(200);
    const youngPair = (await young.json()) as { expires_at: number; refresh_expires_at: number };
    const end = Math.floor(Date.now() / 1000) + 100;
    expect(Math.abs(youngPair.refresh_expires_at - end)).toBeLessThanOrEqual(2);
    expect(youngPair.expires_at).toBeLessThanOrEqual(youngPair.refresh_expires_at);
    const ended = await refresh(await chainToken(sub, 7200), e);
    expect(ended.status).toBe(401);
    expect(await ended.json()).toMatchObject({ code: "unauthenticated", msg: expect.stringContaining("SESSION_TTL") });
    // With the default of 30d.
    expect((await refresh(await chainToken(sub, 30 * 86400))).status).toBe(401);
    expect((await refresh(await chainToken(sub, 29 * 86400))).status).toBe(200);
  });

  it("revokes the whole chain when a spent refresh token comes back, and only that chain", async () => {
    const sub = uniq("victim");
    const p0 = await mint({ sub, channels: ["public:bound.*"] });
    const other = await mint({ sub, channels: ["public:bound.*"] });
    const r1 = await refresh(p0.refresh_token);
    expect(r1.status).toBe(200);
    const p1 = (await r1.json()) as { refresh_token: string };
    const r2 = await refresh(p1.refresh_token);
    expect(r2.status).toBe(200);
    const p2 = (await r2.json()) as { refresh_token: string };
    // p0 again: a replay. Its chain is revoked: the pair it returned and every later pair.
    const replay = await refresh(p0.refresh_token);
    expect(replay.status).toBe(401);
    expect(await replay.json()).toMatchObject({ code: "unauthenticated", msg: expect.stringContaining("revoked") });
    expect((await refresh(p2.refresh_token)).status).toBe(401);
    expect((await refresh(p1.refresh_token)).status).toBe(401);
    // The same subject's other session is untouched.
    expect((await refresh(other.refresh_token)).status).toBe(200);
  });

  it("keeps nothing in a subject's ledger once its spent tokens and revoked chains have expired", async () => {
    const stub = env.REFRESH_LEDGER.get(env.REFRESH_LEDGER.idFromName(uniq("ledger-gc")));
    const now = Math.floor(Date.now() / 1000);
    // A token spent, then replayed (its chain revoked): two rows, kept until they expire in an hour.
    expect(await stub.spend("j1", "chain", now + 3600, now + 3600, now)).toBe("spent");
    expect(await stub.spend("j1", "chain", now + 3600, now + 3600, now)).toBe("reused");
    const before = await runInDurableObject(stub, async (_i, state) => {
      const rows = state.storage.sql
        .exec<{ n: number }>("SELECT (SELECT COUNT(*) FROM spent) + (SELECT COUNT(*) FROM revoked) AS n")
        .one().n;
      // The hour passes: their stored expiry moves into the past (the alarm then finds them expired).
      state.storage.sql.exec("UPDATE spent SET expires_at = ?", now - 1);
      state.storage.sql.exec("UPDATE revoked SET expires_at = ?", now - 1);
      return { rows, alarm: await state.storage.getAlarm() };
    });
    expect(before).toEqual({ rows: 2, alarm: (now + 3600) * 1000 });
    expect(await runDurableObjectAlarm(stub)).toBe(true);
    const after = await runInDurableObject(stub, async (_i, state) => ({
      alarm: await state.storage.getAlarm(),
      tables: state.storage.sql
        .exec("SELECT name FROM sqlite_master WHERE type = 'table' AND name IN ('spent', 'revoked')")
        .toArray(),
    }));
    expect(after).toEqual({ alarm: null, tables: [] });
    // And it still works afterwards.
    expect(await stub.spend("j2", "chain2", now + 60, now + 60, now)).toBe("spent");
  });

  it("answers 503 unavailable with no backend text when the refresh ledger fails, and spends nothing", async () => {
    const pair = await mint({ sub: uniq("ledger"), channels: ["public:bound.*"] });
    const res = await withFailing(RefreshLedger, "spend", "SQLITE_BUSY: ledger backend detail", () =>
      refresh(pair.refresh_token),
    );
    expect(res.status).toBe(503);
    const text = await res.text();
    expect(JSON.parse(text)).toMatchObject({ code: "unavailable", meta: { code: "UNAVAILABLE" } });
    expect(text).not.toMatch(/SQLITE|backend detail/);
    expect((await refresh(pair.refresh_token)).status).toBe(200);
  });
});

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

describe("tokens out of URLs", () => {
  it("SSE takes the token from Authorization: Bearer", async () => {
    const ch = `private:bound.x.${uniq()}`;
    const token = await accessToken(uniq("sse"));
    expect((await sse(env, ch, { "cf-connecting-ip": freshIp() })).status).toBe(401);
    const res = await sse(env, ch, { authorization: `Bearer ${token}` });
    expect(res.status).toBe(200);
    expect((await publishTo(ch, token, { via: "header" })).status).toBe(200);
    const [event] = await readSse(res, 1);
    expect(event?.data).toMatchObject({ channel: ch, data: { via: "header" } });
  });

  it("a browser WebSocket sends the token as the bearer.<token> subprotocol and gets floodgate back", async () => {
    const ch = `private:bound.x.${uniq()}`;
    const token = await accessToken(uniq("ws"));
    const res = await ws(env, ch, { "sec-websocket-protocol": `floodgate, bearer.${token}` });
    expect(res.status).toBe(101);
    expect(res.headers.get("sec-websocket-protocol")).toBe("floodgate");
    const socket = res.webSocket as WebSocket;
    socket.accept();
    const got = new Promise<string>((resolve) =>
      socket.addEventListener("message", (ev) => resolve(ev.data as string)),
    );
    expect((await publishTo(ch, token, { via: "subprotocol" })).status).toBe(200);
    expect(JSON.parse(await got)).toMatchObject({ data: { via: "subprotocol" } });
    socket.close();
    // Without the token, with a bad one, or without the floodgate protocol to answer with: refused.
    const ip = freshIp();
    expect((await ws(env, ch, { "sec-websocket-protocol": "floodgate", "cf-connecting-ip": ip })).status).toBe(401);
    expect(
      (await ws(env, ch, { "sec-websocket-protocol": "floodgate, bearer.x.y.z", "cf-connecting-ip": ip })).status,
    ).toBe(401);
    const noProtocol = await ws(env, ch, { "sec-websocket-protocol": `bearer.${token}`, "cf-connecting-ip": ip });
    expect(noProtocol.status).toBe(400);
    expect(await noProtocol.json()).toMatchObject({ msg: expect.stringContaining('"floodgate"') });
  });

  it("the client sends its token in a header or subprotocol, never in the URL", async () => {
    const ch = `private:bound.x.${uniq()}`;
    const token = await accessToken(uniq("client"));
    const urls: string[] = [];
    const protocolsSeen: string[][] = [];
    const workerFetch = (input: string, init?: RequestInit) => {
      urls.push(input);
      return callAndWait(input.slice(BASE.length), init);
    };
    const open = async (url: string, protocols: string[]): Promise<SocketLike> => {
      urls.push(url);
      protocolsSeen.push(protocols);
      const res = await callAndWait(url.replace(/^ws/, "http").slice(BASE.length), {
        headers: { upgrade: "websocket", "sec-websocket-protocol": protocols.join(", ") },
      });
      if (res.status !== 101 || !res.webSocket) throw new Error(`upgrade failed: ${res.status}`);
      res.webSocket.accept();
      return res.webSocket as unknown as SocketLike;
    };
    for (const transport of ["websocket", "sse"] as const) {
      const fg = new FloodgateClient({ baseUrl: BASE, accessToken: token, fetch: workerFetch, openWebSocket: open });
      const got: Message[] = [];
      const sub = fg.subscribe(ch, (m) => got.push(m), { transport, after: 0 });
      for (let i = 0; i < 300 && got.length === 0; i++) {
        if (i % 20 === 0) await publishTo(ch, token, { transport });
        await new Promise((r) => setTimeout(r, 10));
      }
      sub.close();
      expect(got.length).toBeGreaterThan(0);
    }
    expect(urls.length).toBeGreaterThanOrEqual(2);
    for (const url of urls) expect(url).not.toContain(token);
    expect(protocolsSeen[0]).toEqual(["floodgate", `bearer.${token}`]);
  });
});

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
