/**
 * A subject's budget is charged only for a verified access token (docs/security.md): a forged, expired or
 * refresh token neither spends nor reveals anyone's budget.
 */
import { describe, expect, it } from "vitest";
import { base64UrlEncode, signToken } from "../../../src/worker/auth/tokens";
import { envWith, freshIp, peekBucket, uniq } from "../../support/helpers";
import { accessToken, closeQuietly, SECRET, sse, ws } from "../../support/raw-requests";

describe("verify before charging a subject", () => {
  it("a forged token never spends or reveals another subject's budget", async () => {
    const e = envWith({ SUBSCRIBE_RATE: "3/h", SUBSCRIBE_BURST: "", READ_RATE: "100/s" });
    const alice = uniq("alice");
    const ch = `public:bound.${uniq()}`;
    const real = await sse(e, ch, { authorization: `Bearer ${await accessToken(alice)}` });
    expect(real.headers.get("RateLimit")).toMatch(/^"subscribe";r=2;t=\d+$/);
    closeQuietly(real);
    const stored = await peekBucket(`subscribe:${alice}`);
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
    expect(await peekBucket(`subscribe:${alice}`)).toEqual(stored);
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
    expect(await peekBucket(`subscribe:${sub}`)).toBeNull();
  });
});
