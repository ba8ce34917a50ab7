/**
 * Token mint and refresh through the real routes, token verification edge cases, and the token decoder
 * property-based (fast-check): nothing thrown but TokenError, no single-character change accepted.
 */
import { env } from "cloudflare:workers";
import fc from "fast-check";
import { describe, expect, it } from "vitest";
import {
  base64UrlEncode,
  MAX_TOKEN_LENGTH,
  signToken,
  type TokenClaims,
  TokenError,
  VERIFIED_CACHE_BYTES,
  verifiedTokens,
  verifyToken,
} from "../../../src/worker/auth/tokens";
import { ADMIN, adminHeaders, call, callAndWait, envWith, freshIp, mint, publishTo, uniq } from "../../support/helpers";
import { anyString, RUNS } from "../../support/property-inputs";

const SECRET = "test-token-secret-0123456789abcdef";

const decode = (t: string) =>
  JSON.parse(atob((t.split(".")[1] as string).replace(/-/g, "+").replace(/_/g, "/"))) as TokenClaims;

function mintRaw(body: unknown, headers: Record<string, string> = adminHeaders()) {
  return call("/v1/tokens", {
    method: "POST",
    headers: { "cf-connecting-ip": freshIp(), ...headers },
    body: typeof body === "string" ? body : JSON.stringify(body),
  });
}

function refresh(token: string) {
  return call("/v1/tokens/refresh", {
    method: "POST",
    headers: { "content-type": "application/json", "cf-connecting-ip": freshIp() },
    body: JSON.stringify({ refresh_token: token }),
  });
}

describe("minting", () => {
  it("answers 201 with a pair and epoch-second expiries, defaults ttl 5m and refresh_ttl 1h", async () => {
    const res = await mintRaw({ sub: "alice", channels: ["public:live.*"] });
    expect(res.status).toBe(201);
    const body = (await res.json()) as Record<string, unknown>;
    expect(Object.keys(body).sort()).toEqual(["access_token", "expires_at", "refresh_expires_at", "refresh_token"]);
    const a = decode(body.access_token as string);
    const r = decode(body.refresh_token as string);
    expect(a).toMatchObject({ sub: "alice", typ: "access", chs: ["public:live.*"], scp: ["publish", "subscribe"] });
    expect(r.typ).toBe("refresh");
    expect(a.exp - a.iat).toBe(300);
    expect(r.exp - r.iat).toBe(3600);
    expect(body.expires_at).toBe(a.exp);
    expect(body.refresh_expires_at).toBe(r.exp);
    expect(Math.abs(a.iat - Date.now() / 1000)).toBeLessThan(5);
    expect(a.jti).not.toBe(r.jti);
  });

  it("carries scopes, ttl and a normalised rl override", async () => {
    const res = await mintRaw({
      sub: "bob",
      channels: ["public:a.b"],
      scopes: ["subscribe"],
      ttl: "1h",
      refresh_ttl: "7d",
      rl: "10/s",
    });
    expect(res.status).toBe(201);
    const a = decode(((await res.json()) as { access_token: string }).access_token);
    expect(a.scp).toEqual(["subscribe"]);
    expect(a.exp - a.iat).toBe(3600);
    expect(a.rl).toEqual({ rate: 10, per: "1s", burst: 10 });
  });

  it.each([
    [{ channels: ["public:a.b"] }, "missing sub"],
    [{ sub: "", channels: ["public:a.b"] }, "empty sub"],
    [{ sub: "a b", channels: ["public:a.b"] }, "bad sub"],
    [{ sub: "x".repeat(129), channels: ["public:a.b"] }, "long sub"],
    [{ sub: "a" }, "missing channels"],
    [{ sub: "a", channels: [] }, "no channels"],
    [{ sub: "a", channels: Array.from({ length: 33 }, (_, i) => `public:a.c${i}`) }, "33 channels"],
    [{ sub: "a", channels: ["public:a.**.b"] }, "bad pattern"],
    [{ sub: "a", channels: ["public:a.b"], scopes: ["admin"] }, "unknown scope"],
    [{ sub: "a", channels: ["public:a.b"], ttl: "5 minutes" }, "bad ttl"],
    [{ sub: "a", channels: ["public:a.b"], ttl: "25h" }, "ttl over 24h"],
    [{ sub: "a", channels: ["public:a.b"], refresh_ttl: "8d" }, "refresh_ttl over 7d"],
    [{ sub: "a", channels: ["public:a.b"], rl: "fast" }, "bad rl"],
    [{ sub: "a", channels: ["public:a.b"], rl: "0/s" }, "disabled rl"],
    [{ sub: "a", channels: ["public:a.b"], admin: true }, "unknown field"],
    ["[1,2]", "not an object"],
    ["{", "not JSON"],
  ] as [unknown, string][])("refuses %j with 400 (%s)", async (body) => {
    const res = await mintRaw(body);
    expect(res.status).toBe(400);
    expect(await res.json()).toMatchObject({ code: "invalid_argument", meta: { code: "INVALID_ARGUMENT" } });
  });

  it.each([
    ["private:team.*", "private channels have 3 to 4 components"],
    ["private:team", "private channels have 3 to 4 components"],
    ["public:live", "public channels have 2 to 4 components"],
    ["public:*", "exactly 1"],
    ["public:a.b.c.d.e", "exactly 5"],
    ["public:a.b.c.d.**", "5 or more"],
    [`public:${"a".repeat(64)}.${"b".repeat(64)}.${"c".repeat(64)}.*`, "longer than 200 characters"],
  ])("refuses %s, which no channel name can match, with 400 naming it", async (pattern, why) => {
    const res = await mintRaw({ sub: "a", channels: ["public:a.b", pattern] });
    expect(res.status).toBe(400);
    const body = (await res.json()) as { code: string; msg: string };
    expect(body.code).toBe("invalid_argument");
    expect(body.msg).toContain(pattern);
    expect(body.msg).toContain(why);
  });

  it.each(["private:team.**", "private:team.*.*", "public:**", "public:*.*", "public:a.b.c.**"])(
    "mints %s, which some channel matches",
    async (pattern) => {
      expect((await mintRaw({ sub: "a", channels: [pattern] })).status).toBe(201);
    },
  );

  it("needs the admin bearer: none, wrong or a user token answer 401", async () => {
    const body = { sub: "a", channels: ["public:a.b"] };
    expect((await mintRaw(body, { "content-type": "application/json" })).status).toBe(401);
    expect((await mintRaw(body, adminHeaders({ authorization: "Bearer nope" }))).status).toBe(401);
    const user = await mint({ sub: "u", channels: ["public:a.b"] });
    const res = await mintRaw(body, adminHeaders({ authorization: `Bearer ${user.access_token}` }));
    expect(res.status).toBe(401);
    expect(await res.json()).toMatchObject({ code: "unauthenticated", meta: { code: "UNAUTHENTICATED" } });
  });

  it("fails closed with 500 when the secrets are missing, without leaking anything else", async () => {
    const noSecret = envWith({ TOKEN_SECRET: undefined });
    const res = await callAndWait(
      "/v1/tokens",
      {
        method: "POST",
        headers: adminHeaders({ "cf-connecting-ip": freshIp() }),
        body: JSON.stringify({ sub: "a", channels: ["public:a.b"] }),
      },
      noSecret,
    );
    expect(res.status).toBe(500);
    const body = (await res.json()) as { code: string; msg: string };
    expect(body.code).toBe("internal");
    expect(body.msg).toMatch(/TOKEN_SECRET/);
    const noAdmin = envWith({ ADMIN_TOKEN: "" });
    const res2 = await callAndWait("/v1/admin/throttle/*", { headers: { authorization: "Bearer " } }, noAdmin);
    expect(res2.status).toBe(500);
  });
});

describe("refresh", () => {
  it("rotates: the new pair keeps sub, chs, scp and rl, and the old refresh token works only once", async () => {
    const pair = await mint({
      sub: "carol",
      channels: ["public:x.*", "private:team.a.**"],
      scopes: ["publish"],
      rl: { rate: 3, per: "1m", burst: 5 },
      ttl: "10m",
    });
    const res = await refresh(pair.refresh_token);
    expect(res.status).toBe(200);
    const next = (await res.json()) as { access_token: string; refresh_token: string };
    const a = decode(next.access_token);
    expect(a).toMatchObject({
      sub: "carol",
      chs: ["public:x.*", "private:team.a.**"],
      scp: ["publish"],
      rl: { rate: 3, per: "1m", burst: 5 },
    });
    expect(a.exp - a.iat).toBe(600);
    // The rotated token works once too.
    expect((await refresh(next.refresh_token)).status).toBe(200);
    expect((await refresh(next.refresh_token)).status).toBe(401);
    const again = await refresh(pair.refresh_token);
    expect(again.status).toBe(401);
    expect(await again.json()).toMatchObject({ code: "unauthenticated" });
  });

  it("only one of many concurrent refreshes of the same token succeeds", async () => {
    const pair = await mint({ sub: uniq("race"), channels: ["public:a.b"] });
    const results = await Promise.all(Array.from({ length: 10 }, () => refresh(pair.refresh_token)));
    expect(results.filter((r) => r.status === 200)).toHaveLength(1);
    expect(results.filter((r) => r.status === 401)).toHaveLength(9);
  });

  it("refuses an access token, garbage and unknown fields", async () => {
    const pair = await mint({ sub: "dave", channels: ["public:a.b"] });
    expect((await refresh(pair.access_token)).status).toBe(401);
    expect((await refresh("garbage")).status).toBe(401);
    const res = await call("/v1/tokens/refresh", {
      method: "POST",
      headers: { "cf-connecting-ip": freshIp() },
      body: JSON.stringify({ refresh_token: pair.refresh_token, extra: 1 }),
    });
    expect(res.status).toBe(400);
  });
});

describe("verification on publish", () => {
  const ch = `public:tok.${uniq()}`;
  const now = () => Math.floor(Date.now() / 1000);
  const claims = (over: Partial<TokenClaims> = {}): TokenClaims => ({
    sub: "eve",
    typ: "access",
    chs: ["public:tok.*"],
    scp: ["publish", "subscribe"],
    iat: now(),
    exp: now() + 60,
    jti: crypto.randomUUID(),
    ...over,
  });
  const status = async (token: string) => (await publishTo(ch, token, { x: 1 })).status;

  it("accepts a good token", async () => {
    expect(await status(await signToken(claims(), SECRET))).toBe(200);
  });

  it("401s a tampered payload", async () => {
    const good = await signToken(claims(), SECRET);
    const [h, , s] = good.split(".");
    const forged = base64UrlEncode(new TextEncoder().encode(JSON.stringify(claims({ sub: "mallory" }))));
    expect(await status(`${h}.${forged}.${s}`)).toBe(401);
  });

  it("401s an expired token (valid while now < exp, no leeway)", async () => {
    expect(await status(await signToken(claims({ exp: now() }), SECRET))).toBe(401);
    expect(await status(await signToken(claims({ exp: now() - 3600 }), SECRET))).toBe(401);
  });

  it("401s a token issued more than 60 s in the future, accepts one within the skew", async () => {
    const ahead = await signToken(claims({ iat: now() + 3600, exp: now() + 7200 }), SECRET);
    const res = await publishTo(ch, ahead, { x: 1 });
    expect(res.status).toBe(401);
    expect(await res.json()).toMatchObject({ code: "unauthenticated", msg: expect.stringContaining("future") });
    expect(await status(await signToken(claims({ iat: now() + 61 + 5, exp: now() + 600 }), SECRET))).toBe(401);
    expect(await status(await signToken(claims({ iat: now() + 30, exp: now() + 600 }), SECRET))).toBe(200);
  });

  it("401s a refresh token issued in the future", async () => {
    const future = await signToken(claims({ typ: "refresh", iat: now() + 3600, exp: now() + 7200 }), SECRET);
    const res = await refresh(future);
    expect(res.status).toBe(401);
    expect(await res.text()).toContain("future");
  });

  it("401s a refresh token used as an access token", async () => {
    expect(await status(await signToken(claims({ typ: "refresh" }), SECRET))).toBe(401);
  });

  it("401s alg none, another algorithm, the admin secret, and malformed tokens", async () => {
    const payload = base64UrlEncode(new TextEncoder().encode(JSON.stringify(claims())));
    const hdr = (alg: string) => base64UrlEncode(new TextEncoder().encode(JSON.stringify({ alg, typ: "JWT" })));
    expect(await status(`${hdr("none")}.${payload}.`)).toBe(401);
    const good = await signToken(claims(), SECRET);
    expect(await status(`${hdr("HS512")}.${payload}.${good.split(".")[2]}`)).toBe(401);
    expect(await status(await signToken(claims(), ADMIN))).toBe(401);
    expect(await status("a.b")).toBe(401);
    expect(await status("!!!.???.***")).toBe(401);
    expect(await status("x".repeat(10_000))).toBe(401);
  });

  it("403s a token without the scope or the channel", async () => {
    expect(await status(await signToken(claims({ scp: ["subscribe"] }), SECRET))).toBe(403);
    const res = await publishTo(ch, await signToken(claims({ chs: ["public:other.*"] }), SECRET), 1);
    expect(res.status).toBe(403);
    expect(await res.json()).toMatchObject({ code: "permission_denied", meta: { code: "PERMISSION_DENIED" } });
  });

  it("a token minted for the admin route is no admin", async () => {
    const res = await call("/v1/admin/throttle/*", {
      headers: { authorization: `Bearer ${await signToken(claims(), SECRET)}` },
    });
    expect(res.status).toBe(401);
    expect(env.ADMIN_TOKEN).toBe(ADMIN);
  });
});

describe("token decoder", () => {
  const secret = "property-secret-0123456789";
  const now = 1_800_000_000;

  it("never throws anything but TokenError on arbitrary input", async () => {
    await fc.assert(
      fc.asyncProperty(
        fc.oneof(
          anyString,
          fc.tuple(anyString, anyString, anyString).map(([a, b, c]) => `${a}.${b}.${c}`),
        ),
        async (s) => {
          await expect(verifyToken(s, secret, "access", now)).rejects.toBeInstanceOf(TokenError);
        },
      ),
      { ...RUNS, numRuns: 300 },
    );
  });

  it("refuses any single-character change to a valid token", async () => {
    const token = await signToken(
      { sub: "alice", typ: "access", chs: ["public:a.b"], scp: ["publish"], iat: now - 10, exp: now + 600, jti: "j1" },
      secret,
    );
    await expect(verifyToken(token, secret, "access", now)).resolves.toBeDefined();
    await fc.assert(
      fc.asyncProperty(
        fc.nat({ max: token.length - 1 }),
        fc.constantFrom(..."ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_.".split("")),
        async (i, ch) => {
          fc.pre(token[i] !== ch);
          const tampered = token.slice(0, i) + ch + token.slice(i + 1);
          // Base64url has spare bits: a change in the last character can decode to the same bytes.
          const same = await verifyToken(tampered, secret, "access", now).then(
            (v) => JSON.stringify(v.claims),
            () => null,
          );
          if (same !== null)
            expect(same).toBe(JSON.stringify((await verifyToken(token, secret, "access", now)).claims));
        },
      ),
      { ...RUNS, numRuns: 300 },
    );
  });

  it("a cached token's signature on other claims is no hit: the token fails its own check", async () => {
    verifiedTokens.clear();
    const claims: TokenClaims = {
      sub: "alice",
      typ: "access",
      chs: ["public:a.*"],
      scp: ["subscribe"],
      iat: now,
      exp: now + 60,
      jti: "a1",
    };
    const token = await signToken(claims, secret);
    await verifyToken(token, secret, "access", now);
    const [h, , s] = token.split(".");
    const wider = base64UrlEncode(new TextEncoder().encode(JSON.stringify({ ...claims, chs: ["public:**"] })));
    await expect(verifyToken(`${h}.${wider}.${s}`, secret, "access", now)).rejects.toMatchObject({
      failure: "bad_signature",
    });
    // The original is still a hit.
    expect((await verifyToken(token, secret, "access", now)).claims.chs).toEqual(["public:a.*"]);
  });

  it("caches verified tokens by their signature part, bounded in bytes: a flood of large tokens cannot grow the isolate", async () => {
    verifiedTokens.clear();
    const big = (n: number) =>
      signToken(
        {
          sub: `flood-${n}`,
          typ: "access",
          // About 6,000 characters of claims: the token is near MAX_TOKEN_LENGTH.
          chs: Array.from(
            { length: 200 },
            (_, i) => `public:c${String(n).padStart(5, "0")}.p${String(i).padStart(8, "0")}`,
          ),
          scp: ["subscribe"],
          iat: now - 10,
          exp: now + 600,
          jti: `j${n}`,
        },
        secret,
      );
    const first = await big(0);
    expect(first.length).toBeGreaterThan(MAX_TOKEN_LENGTH - 1500);
    await verifyToken(first, secret, "access", now);
    const count = Math.ceil((2 * VERIFIED_CACHE_BYTES) / first.length);
    for (let n = 1; n <= count; n++) await verifyToken(await big(n), secret, "access", now);
    expect(verifiedTokens.byteSize).toBeLessThanOrEqual(VERIFIED_CACHE_BYTES);
    expect(verifiedTokens.byteSize).toBeGreaterThan(VERIFIED_CACHE_BYTES / 2);
    // Each entry counts at least the token's own characters at 2 bytes each.
    expect(verifiedTokens.byteSize / verifiedTokens.size).toBeGreaterThan(2 * first.length);
    for (const key of verifiedTokens.keys()) expect(key).toMatch(/^[A-Za-z0-9_-]{43}$/);
    // The oldest went first; the newest is still a hit, and still checked for expiry on every use.
    const last = await big(count);
    const hits = verifiedTokens.size;
    await verifyToken(last, secret, "access", now);
    expect(verifiedTokens.size).toBe(hits);
    await expect(verifyToken(last, secret, "access", now + 600)).rejects.toMatchObject({ failure: "expired" });
  });

  it("refuses alg none, other algorithms, and a token signed with a different secret", async () => {
    const claims = {
      sub: "mallory",
      typ: "access",
      chs: ["public:**"],
      scp: ["publish"],
      iat: now,
      exp: now + 60,
      jti: "x",
    };
    const payload = base64UrlEncode(new TextEncoder().encode(JSON.stringify(claims)));
    for (const alg of ["none", "HS512", "RS256", "hs256"]) {
      const header = base64UrlEncode(new TextEncoder().encode(JSON.stringify({ alg, typ: "JWT" })));
      await expect(verifyToken(`${header}.${payload}.`, secret, "access", now)).rejects.toBeInstanceOf(TokenError);
      await expect(verifyToken(`${header}.${payload}.c2ln`, secret, "access", now)).rejects.toBeInstanceOf(TokenError);
    }
    const other = await signToken(claims as never, "the-admin-token-or-any-other-secret");
    await expect(verifyToken(other, secret, "access", now)).rejects.toMatchObject({ failure: "bad_signature" });
  });
});
