/**
 * Sessions end (docs/security.md): a refresh chain is capped at SESSION_TTL, a reused refresh token revokes its
 * whole chain, the ledger forgets what has expired, and a failing ledger answers 503 and spends nothing.
 */
import { runDurableObjectAlarm, runInDurableObject } from "cloudflare:test";
import { env } from "cloudflare:workers";
import { describe, expect, it } from "vitest";
import { RefreshLedger } from "../../src/refresh-ledger/refresh-ledger";
import { signToken } from "../../src/worker/auth/tokens";
import { adminHeaders, callAndWait, envWith, freshIp, mint, uniq, withFailing } from "../support/helpers";
import { decode, SECRET } from "../support/raw-requests";

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
