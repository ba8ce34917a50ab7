/**
 * The before-publish throttle end to end in workerd: real KV, real channel objects, the analytics
 * channel, fallbacks, clamping, and a copy the drops queue refuses.
 */

import { env } from "cloudflare:workers";
import { afterEach, describe, expect, it, vi } from "vitest";
import {
  adminHeaders,
  call,
  callAndWait,
  envWith,
  historyOf,
  mint,
  publishAndWait,
  SLOW_TEST_MS,
  setRate,
  uniq,
  until,
} from "../../support/helpers";

const ANALYTICS = "private:floodgate.analytics.dropped";

async function tokens() {
  // A generous per-token budget so the publish limit never interferes with counting drops.
  const pub = (await mint({ sub: uniq("pub"), channels: ["public:thr.*"], rl: "10000/s" })).access_token;
  const reader = (
    await mint({ sub: uniq("analyst"), channels: ["private:floodgate.analytics.dropped"], scopes: ["subscribe"] })
  ).access_token;
  return { pub, reader };
}

async function statsOf(ch: string) {
  const res = await call(`/v1/channels/${ch}/stats`, { headers: adminHeaders() });
  expect(res.status).toBe(200);
  return (await res.json()) as Record<string, unknown>;
}

async function countStatuses(ch: string, token: string, n: number, customEnv: Env = env) {
  const counts = { 200: 0, 202: 0 } as Record<number, number>;
  for (let i = 0; i < n; i++) {
    const s = (await publishAndWait(ch, token, { i }, {}, customEnv)).status;
    counts[s] = (counts[s] ?? 0) + 1;
  }
  return counts;
}

afterEach(async () => {
  await env.THROTTLE_KV.delete("throttleRate");
});

describe("drop rate from KV", () => {
  it("rate 0 delivers every message", async () => {
    const ch = `public:thr.${uniq()}`;
    const { pub } = await tokens();
    await setRate(ch, 0);
    expect(await countStatuses(ch, pub, 30)).toEqual({ 200: 30, 202: 0 });
  });

  it("rate 1 drops every message into the analytics channel, in the API's shape", async () => {
    const ch = `public:thr.${uniq()}`;
    const { pub, reader } = await tokens();
    await setRate(ch, 1);
    for (let i = 0; i < 20; i++) {
      const res = await publishAndWait(ch, pub, { i });
      expect(res.status).toBe(202);
      expect(await res.json()).toEqual({ status: "dropped" });
    }
    // Picked out by source channel, not by position: other tests of this file drop into the same
    // analytics channel, in whatever order the tests run.
    // The copies reach the analytics channel through the drops queue's consumer, which takes a
    // delivery when its batch fills or its max_batch_timeout ends: wait for it, no fixed sleep.
    const mineNow = async () =>
      (await historyOf(ANALYTICS, reader, "?limit=1000"))
        .map((f) => f.data as Record<string, unknown>)
        .filter((d) => d.source_channel === ch);
    await until(async () => (await mineNow()).length >= 20, "20 copies on the analytics channel");
    const mine = await mineNow();
    expect(mine).toHaveLength(20);
    expect(mine.map((d) => (d.message as { i: number }).i)).toEqual(Array.from({ length: 20 }, (_, i) => i));
    for (const d of mine) {
      expect(Object.keys(d).sort()).toEqual(["drop_rate", "dropped_at", "message", "publisher", "source_channel"]);
      expect(d.drop_rate).toBe(1);
      expect(typeof d.dropped_at).toBe("number");
      expect(typeof d.publisher).toBe("string");
    }
    expect(await historyOf(ch, null)).toEqual([]);
    expect(await statsOf(ch)).toMatchObject({ delivered_total: 0, dropped_total: 20, drop_rate: 1 });
  });

  it("rate 0.5 drops about half", { timeout: SLOW_TEST_MS }, async () => {
    const ch = `public:thr.${uniq()}`;
    const { pub } = await tokens();
    await setRate(ch, 0.5);
    const counts = await countStatuses(ch, pub, 300);
    // sd of a binomial(300, 0.5) is 8.7; ±50 is almost 6 sd, so this fails only if the rate is wrong.
    expect(counts[202]).toBeGreaterThan(100);
    expect(counts[202]).toBeLessThan(200);
    expect((counts[200] ?? 0) + (counts[202] ?? 0)).toBe(300);
    expect(await statsOf(ch)).toMatchObject({ delivered_total: counts[200], dropped_total: counts[202] });
  });

  it("falls back to the global key, and the channel key wins over it", async () => {
    const a = `public:thr.${uniq()}`;
    const b = `public:thr.${uniq()}`;
    const { pub } = await tokens();
    await setRate("*", 1);
    await setRate(b, 0);
    expect(await countStatuses(a, pub, 5)).toEqual({ 200: 0, 202: 5 });
    expect(await countStatuses(b, pub, 5)).toEqual({ 200: 5, 202: 0 });
  });

  it.each([
    ["7", 202],
    ["1e3", 202],
    ["-2", 200],
  ])("clamps a stored %j", async (stored, status) => {
    const ch = `public:thr.${uniq()}`;
    const { pub } = await tokens();
    await env.THROTTLE_KV.put(`throttleRate:${ch}`, stored);
    const custom = envWith({}); // a fresh isolate-level cache, so the KV write is seen at once
    expect((await publishAndWait(ch, pub, 1, {}, custom)).status).toBe(status);
  });

  it.each([
    ["garbage", "not-a-number"],
    ["missing", null],
  ])("uses THROTTLE_FALLBACK_RATE when the value is %s", async (_what, stored) => {
    const ch = `public:thr.${uniq()}`;
    const { pub } = await tokens();
    if (stored !== null) await env.THROTTLE_KV.put(`throttleRate:${ch}`, stored);
    expect(await countStatuses(ch, pub, 5, envWith({ THROTTLE_FALLBACK_RATE: "1" }))).toEqual({ 200: 0, 202: 5 });
    expect(await countStatuses(ch, pub, 5, envWith({ THROTTLE_FALLBACK_RATE: "0" }))).toEqual({ 200: 5, 202: 0 });
  });

  it("uses the fallback when KV throws, and publishes keep flowing", async () => {
    const ch = `public:thr.${uniq()}`;
    const { pub } = await tokens();
    // Fault injection: a KV binding whose reads fail, around nothing else.
    const brokenKv = {
      get: async () => {
        throw new Error("KV backend exploded: secret internal detail");
      },
    };
    const custom = envWith({ THROTTLE_KV: brokenKv, THROTTLE_FALLBACK_RATE: "0" });
    const res = await publishAndWait(ch, pub, { ok: true }, {}, custom);
    expect(res.status).toBe(200);
    expect(await res.text()).not.toMatch(/exploded/);
    expect(await countStatuses(ch, pub, 5, custom)).toEqual({ 200: 5, 202: 0 });
  });

  it("a rate written through the admin API takes effect at once in this isolate", async () => {
    const ch = `public:thr.${uniq()}`;
    const { pub } = await tokens();
    expect((await publishAndWait(ch, pub, 1)).status).toBe(200);
    await setRate(ch, 1);
    expect((await publishAndWait(ch, pub, 2)).status).toBe(202);
    await call(`/v1/admin/throttle/${ch}`, { method: "DELETE", headers: adminHeaders() });
    expect((await publishAndWait(ch, pub, 3)).status).toBe(200);
  });

  it("the analytics channel takes no publish, even from a token granting it: 403, not a drop", async () => {
    const writer = (await mint({ sub: uniq("ops"), channels: ["private:floodgate.analytics.dropped"] })).access_token;
    await setRate("*", 1);
    await setRate(ANALYTICS, 1);
    const marker = uniq("manual");
    const res = await publishAndWait(ANALYTICS, writer, { marker });
    expect(res.status).toBe(403);
    expect(await res.json()).toMatchObject({ code: "permission_denied", meta: { code: "PERMISSION_DENIED" } });
    await call(`/v1/admin/throttle/${ANALYTICS}`, { method: "DELETE", headers: adminHeaders() });
    const history = await historyOf(ANALYTICS, writer, "?limit=1000");
    expect(JSON.stringify(history)).not.toContain(marker);
  });

  it("an idempotent retry of a dropped publish answers 202 again and copies once", async () => {
    const ch = `public:thr.${uniq()}`;
    const { pub, reader } = await tokens();
    await setRate(ch, 1);
    const key = { "idempotency-key": uniq("k") };
    expect((await publishAndWait(ch, pub, "once", key)).status).toBe(202);
    await setRate(ch, 0);
    expect((await publishAndWait(ch, pub, "once", key)).status).toBe(202);
    // Copies reach the analytics channel through the drops queue's consumer, a moment later.
    const copiesOf = async () =>
      (await historyOf(ANALYTICS, reader, "?limit=1000")).filter(
        (f) => (f.data as { source_channel: string }).source_channel === ch,
      );
    await until(async () => (await copiesOf()).length > 0, "the copy on the analytics channel");
    expect(await copiesOf()).toHaveLength(1);
    expect(await statsOf(ch)).toMatchObject({ dropped_total: 1, delivered_total: 0 });
  });
});

describe("a copy the drops queue refuses", () => {
  it("leaves the message dropped, and counts and logs the failure", async () => {
    const ch = `public:thr.${uniq()}`;
    const { pub, reader } = await tokens();
    await setRate(ch, 1);
    // The drops queue refuses every send made through this env.
    const refusing = { sendBatch: () => Promise.reject(new Error("queue unavailable")) } as unknown as Queue;
    const custom = envWith({ DROPS_QUEUE: refusing });
    const metricsBefore = await metricValue("floodgate_record_failures_total", custom);
    const logged = vi.spyOn(console, "error");
    let res: Response;
    let lines: string[];
    try {
      res = await publishAndWait(ch, pub, { lost: false }, {}, custom);
    } finally {
      lines = logged.mock.calls.map((args) => args.join(" "));
      logged.mockRestore();
    }
    expect(res.status).toBe(202);
    // The log line names the source channel and the lost copy's message id.
    const line = lines.find((l) => l.includes(ch));
    expect(line).toMatch(new RegExp(`${ch.replace(/[.]/g, "\\.")} \\(1: [0-9a-f-]{36}\\)`));
    expect(await historyOf(ch, null)).toEqual([]);
    const copies = (await historyOf(ANALYTICS, reader, "?limit=1000")).filter(
      (f) => (f.data as { source_channel: string }).source_channel === ch,
    );
    expect(copies).toHaveLength(0);
    expect(await statsOf(ch)).toMatchObject({ dropped_total: 1, analytics_copy_failures_total: 1 });
    expect(await metricValue("floodgate_record_failures_total", custom)).toBe(metricsBefore + 1);
  });
});

async function metricValue(series: string, customEnv: Env = env): Promise<number> {
  const res = await callAndWait("/metrics", { headers: adminHeaders() }, customEnv);
  const line = (await res.text()).split("\n").find((l) => l.startsWith(`${series} `));
  return Number(line?.split(" ")[1] ?? Number.NaN);
}
