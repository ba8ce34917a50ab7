/**
 * Priority messages (docs/api.md, "Priority messages"): `Floodgate-Priority: high` from a token with
 * the `priority` scope is never dropped by the throttle, still charged to the publish budget; without
 * the scope 403, any other value 400, both before anything is charged.
 */
import { describe, expect, it } from "vitest";
import {
  adminHeaders,
  call,
  callAndWait,
  freshIp,
  mint,
  peekBucket,
  publishAndWait,
  setRate,
  uniq,
} from "../../support/helpers";

const HIGH = { "floodgate-priority": "high" };

async function token(scopes?: string[], rl = "100000/s"): Promise<{ token: string; sub: string }> {
  const sub = uniq("prio");
  const pair = await mint({ sub, channels: ["public:prio.*"], rl, ...(scopes ? { scopes } : {}) });
  return { token: pair.access_token, sub };
}

async function stats(ch: string): Promise<{ delivered_total: number; dropped_total: number; priority_total: number }> {
  const res = await callAndWait(`/v1/channels/${ch}/stats`, { headers: adminHeaders() });
  return (await res.json()) as { delivered_total: number; dropped_total: number; priority_total: number };
}

describe("priority messages", () => {
  it("at drop rate 1, a high-priority publish is delivered; normal and unmarked ones are dropped", async () => {
    const ch = `public:prio.${uniq()}`;
    const { token: t } = await token(["publish", "priority"]);
    await setRate(ch, 1);
    const res = await publishAndWait(ch, t, { n: 1 }, HIGH);
    expect(res.status).toBe(200);
    expect(await res.json()).toMatchObject({ status: "delivered", channel: ch, seq: 1 });
    // With an Idempotency-Key too (decided in the channel's batch): delivered, and answered again.
    const key = { ...HIGH, "idempotency-key": uniq("k") };
    const keyed = await publishAndWait(ch, t, { n: 2 }, key);
    expect(keyed.status).toBe(200);
    expect(await (await publishAndWait(ch, t, { n: 2 }, key)).json()).toMatchObject({ status: "delivered", seq: 2 });
    expect((await publishAndWait(ch, t, { n: 3 }, { "floodgate-priority": "normal" })).status).toBe(202);
    expect((await publishAndWait(ch, t, { n: 4 })).status).toBe(202);
    expect(await stats(ch)).toMatchObject({ delivered_total: 2, dropped_total: 2, priority_total: 2 });
  });

  it("high priority is still charged to the publish budget", async () => {
    const ch = `public:prio.${uniq()}`;
    const { token: t, sub } = await token(["publish", "priority"], "2/m");
    expect((await publishAndWait(ch, t, { n: 1 }, HIGH)).status).toBe(200);
    expect((await publishAndWait(ch, t, { n: 2 }, HIGH)).status).toBe(200);
    const denied = await publishAndWait(ch, t, { n: 3 }, HIGH);
    expect(denied.status).toBe(429);
    expect((await denied.json()) as { meta: { bucket: string } }).toMatchObject({ meta: { bucket: "publish" } });
    expect(await peekBucket(`publish:${sub}`)).not.toBeNull();
  });

  it("high from a token without the priority scope answers 403, and charges nothing", async () => {
    const ch = `public:prio.${uniq()}`;
    // Minted without scopes: publish and subscribe only; priority is asked for by name.
    const { token: t, sub } = await token();
    const res = await call(`/v1/publish/${ch}`, {
      method: "POST",
      headers: { authorization: `Bearer ${t}`, ...HIGH },
      body: "{}",
    });
    expect(res.status).toBe(403);
    expect(await res.json()).toMatchObject({ code: "permission_denied", meta: { code: "PERMISSION_DENIED" } });
    expect(await peekBucket(`publish:${sub}`)).toBeNull();
    expect((await publishAndWait(ch, t, {}, { "floodgate-priority": "normal" })).status).toBe(200);
  });

  it("any other value answers 400, and charges nothing", async () => {
    const ch = `public:prio.${uniq()}`;
    const { token: t, sub } = await token(["publish", "priority"]);
    for (const value of ["HIGH", "urgent", "", "high,high", "1"]) {
      const res = await call(`/v1/publish/${ch}`, {
        method: "POST",
        headers: { authorization: `Bearer ${t}`, "floodgate-priority": value },
        body: "{}",
      });
      expect(res.status, JSON.stringify(value)).toBe(400);
      expect(await res.json()).toMatchObject({ code: "invalid_argument", meta: { code: "INVALID_ARGUMENT" } });
    }
    expect(await peekBucket(`publish:${sub}`)).toBeNull();
  });

  it("the priority scope is minted, kept on refresh, and refused when misspelt", async () => {
    const pair = await mint({ sub: uniq("prio"), channels: ["public:prio.*"], scopes: ["priority", "publish"] });
    const res = await call("/v1/tokens/refresh", {
      method: "POST",
      headers: { "content-type": "application/json", "cf-connecting-ip": freshIp() },
      body: JSON.stringify({ refresh_token: pair.refresh_token }),
    });
    expect(res.status).toBe(200);
    const refreshed = (await res.json()) as { access_token: string };
    const ch = `public:prio.${uniq()}`;
    await setRate(ch, 1);
    expect((await publishAndWait(ch, refreshed.access_token, {}, HIGH)).status).toBe(200);
    const bad = await call("/v1/tokens", {
      method: "POST",
      headers: adminHeaders({ "cf-connecting-ip": freshIp() }),
      body: JSON.stringify({ sub: "a", channels: ["public:prio.*"], scopes: ["prio"] }),
    });
    expect(bad.status).toBe(400);
    expect(((await bad.json()) as { msg: string }).msg).toContain('"priority"');
  });
});
