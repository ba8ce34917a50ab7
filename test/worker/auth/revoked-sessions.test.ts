/**
 * A revoked session ends (docs/security.md, "A revoked session ends"): when a refresh token is used
 * twice its session is revoked, and every access token of that session answers 401 — at once in the
 * isolate that saw the reuse, and in any other once it reads the list of revoked sessions (at most
 * 60 s old). The list keeps a session until its longest access token would have expired, and is
 * bounded. Another isolate is the same isolate with its copy of the list forgotten.
 */
import { runInDurableObject } from "cloudflare:test";
import { env } from "cloudflare:workers";
import { describe, expect, it } from "vitest";
import { revokedSessionsStub } from "../../../src/platform/stubs";
import { addRevoked, MAX_REVOKED_SESSIONS } from "../../../src/refresh-ledger/revoked-sessions";
import { SESSION_REVOKED } from "../../../src/worker/auth/authorise";
import { revokedSessions } from "../../../src/worker/auth/revoked-sessions";
import { call, freshIp, mint, uniq } from "../../support/helpers";
import { decode } from "../../support/raw-requests";

const refresh = (token: string) =>
  call("/v1/tokens/refresh", {
    method: "POST",
    headers: { "cf-connecting-ip": freshIp() },
    body: JSON.stringify({ refresh_token: token }),
  });

/** A read of a private channel's history with `token`: its status says whether the token is accepted. */
const historyStatus = async (ch: string, token: string) =>
  (await call(`/v1/history/${ch}`, { headers: { authorization: `Bearer ${token}`, "cf-connecting-ip": freshIp() } }))
    .status;

describe("a revoked session ends", () => {
  it("every access token of a session whose refresh token was reused answers 401, here at once and elsewhere from the list", async () => {
    const sub = uniq("rev");
    const ch = `private:rev.${uniq()}.x`;
    const p0 = await mint({ sub, channels: ["private:rev.*.*"], ttl: "10m" });
    const other = await mint({ sub, channels: ["private:rev.*.*"] });
    // Access tokens carry their session.
    expect(decode(p0.access_token).sid).toBe(decode(p0.refresh_token).sid);
    const r1 = await refresh(p0.refresh_token);
    expect(r1.status).toBe(200);
    const p1 = (await r1.json()) as { access_token: string };
    expect(await historyStatus(ch, p0.access_token)).toBe(200);
    expect(await historyStatus(ch, p1.access_token)).toBe(200);

    expect((await refresh(p0.refresh_token)).status).toBe(401); // reused: the session is revoked
    for (const token of [p0.access_token, p1.access_token]) {
      const res = await call(`/v1/history/${ch}`, { headers: { authorization: `Bearer ${token}` } });
      expect(res.status).toBe(401);
      expect(await res.json()).toMatchObject({ code: "unauthenticated", msg: SESSION_REVOKED });
    }
    // Another isolate knows nothing yet: it reads the list, and refuses them too.
    revokedSessions.forget();
    expect(await historyStatus(ch, p1.access_token)).toBe(401);
    // The subject's other session is untouched.
    expect(await historyStatus(ch, other.access_token)).toBe(200);

    // Listed until the longest access token of the session would have expired (10 minutes from now).
    const sid = decode(p0.refresh_token).sid as string;
    const now = Math.floor(Date.now() / 1000);
    const list = revokedSessionsStub(env);
    expect(await list.revokedSessions(now)).toContain(sid);
    expect(await list.revokedSessions(now + 600 - 5)).toContain(sid);
    expect(await list.revokedSessions(now + 600 + 5)).not.toContain(sid);
  });

  it("the list is bounded: past its size the session ending first goes", async () => {
    const stub = env.REFRESH_LEDGER.get(env.REFRESH_LEDGER.idFromName(`#${uniq("list")}`));
    const out = await runInDurableObject(stub, (ledger, state) => {
      ledger.revokedSessions(0); // its tables
      const sql = state.storage.sql;
      const now = 1_000_000;
      // Full, with one that ends first.
      sql.exec(
        `WITH RECURSIVE n(i) AS (SELECT 1 UNION ALL SELECT i + 1 FROM n WHERE i < ${MAX_REVOKED_SESSIONS - 1})
         INSERT INTO revoked (sid, expires_at) SELECT 's' || i, ${now + 3600} FROM n`,
      );
      sql.exec("INSERT INTO revoked (sid, expires_at) VALUES ('first-to-end', ?)", now + 60);
      const evicted = addRevoked(sql, "newest", now + 600);
      const sids = new Set(ledger.revokedSessions(now));
      return { evicted, size: sids.size, newest: sids.has("newest"), first: sids.has("first-to-end") };
    });
    expect(out).toEqual({ evicted: true, size: MAX_REVOKED_SESSIONS, newest: true, first: false });
  });
});
