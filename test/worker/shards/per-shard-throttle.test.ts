/**
 * The throttle per shard (docs/api.md, "Shards"): stats per shard, a rate per shard, the record naming
 * the shard of a dropped message, the fast loop holding each shard's target, and the dashboard's
 * overview showing a sharded channel with a lever per shard.
 */
import { runDurableObjectAlarm, runInDurableObject } from "cloudflare:test";
import { env } from "cloudflare:workers";
import { describe, expect, it } from "vitest";
import { rateKey } from "../../../functions/before-publish";
import { shardKey } from "../../../functions/shard-key";
import { leverOf } from "../../../src/worker/routes/dashboard";
import type { ChannelSample } from "../../../src/worker/sampler/sampler-run";
import { ANALYTICS, member, pub, socket, statsOf, stub } from "../../support/audience-shards";
import { backdatePeriod, counter, fastRate, setCounters } from "../../support/channel-internals";
import { adminHeaders, call, cron, historyOf, setRate, uniq, until } from "../../support/helpers";

describe("per-shard throttle, stats and the record", () => {
  it("stats answer totals and each shard; ?shard= sets one shard's rate", async () => {
    const ch = `public:sharded.${uniq()}`;
    const es = await member([ch], "es");
    const fr = await member([ch], "fr");
    const s = await socket(ch, es);
    for (let i = 0; i < 3; i++) await pub(ch, es, i);
    await pub(ch, fr, "x");
    const put = await call(`/v1/admin/throttle/${ch}?shard=fr`, {
      method: "PUT",
      headers: adminHeaders(),
      body: JSON.stringify({ rate: 1 }),
    });
    expect(put.status).toBe(200);
    expect(await put.json()).toMatchObject({ channel: ch, shard: "fr", rate: 1 });
    expect(await env.THROTTLE_KV.get(rateKey(shardKey(ch, "fr")))).toBe("1");
    expect(await env.THROTTLE_KV.get(rateKey(shardKey(ch, "es")))).toBeNull();
    expect((await pub(ch, fr, "y")).status).toBe(202);
    expect((await pub(ch, es, 3)).status).toBe(200);
    await until(() => s.frames.length >= 4, "es's frames");
    const stats = await statsOf(ch);
    expect(stats).toMatchObject({
      channel: ch,
      occupancy: 1,
      delivered_total: 5,
      dropped_total: 1,
      shard_rule: { pattern: "public:sharded.*", by: "group" },
      shards: {
        es: { occupancy: 1, delivered_total: 4, dropped_total: 0, drop_rate: 0 },
        fr: { occupancy: 0, delivered_total: 1, dropped_total: 1, drop_rate: 1 },
      },
    });
    for (const [q, status] of [
      ["?shard=FR", 400],
      ["?shard=", 400],
    ] as const) {
      const res = await call(`/v1/admin/throttle/${ch}${q}`, { headers: adminHeaders() });
      expect(res.status).toBe(status);
    }
    const unsharded = await call(`/v1/admin/throttle/public:plain.${uniq()}?shard=es`, { headers: adminHeaders() });
    expect(unsharded.status).toBe(400);
    s.ws.close();
  });

  it("a shard named like an object's own property (__proto__) is listed like any other", async () => {
    const ch = `public:sharded.${uniq()}`;
    const odd = await member([ch], "__proto__");
    expect((await pub(ch, odd, 1)).status).toBe(200);
    const stats = await statsOf(ch);
    expect(stats.delivered_total).toBe(1);
    expect(Object.entries(stats.shards as object)).toEqual([
      ["__proto__", expect.objectContaining({ delivered_total: 1 })],
    ]);
  });

  it("a rate set without ?shard= reaches every shard, those that appear later too", async () => {
    const ch = `public:sharded.${uniq()}`;
    const es = await member([ch], "es");
    const fr = await member([ch], "fr");
    const de = await member([ch], "de");
    expect((await pub(ch, es, 0)).status).toBe(200); // es exists when the rate is set; fr, de do not
    const put = await call(`/v1/admin/throttle/${ch}?shard=fr`, {
      method: "PUT",
      headers: adminHeaders(),
      body: JSON.stringify({ rate: 0 }),
    });
    expect(put.status).toBe(200);
    const all = await call(`/v1/admin/throttle/${ch}`, {
      method: "PUT",
      headers: adminHeaders(),
      body: JSON.stringify({ rate: 1 }),
    });
    expect(all.status).toBe(200);
    // "All shards" overrides a shard's own rate, and a shard that appears later inherits the channel's.
    expect((await pub(ch, es, 1)).status).toBe(202);
    expect((await pub(ch, fr, 1)).status).toBe(202);
    expect((await pub(ch, de, 1)).status).toBe(202);
    // A shard's own rate still wins over its channel's.
    await call(`/v1/admin/throttle/${ch}?shard=de`, {
      method: "PUT",
      headers: adminHeaders(),
      body: JSON.stringify({ rate: 0 }),
    });
    expect((await pub(ch, de, 2)).status).toBe(200);
    expect((await pub(ch, es, 2)).status).toBe(202);
    expect(((await statsOf(ch)).shards as Record<string, { drop_rate: number }>).fr?.drop_rate).toBe(1);
    // DELETE without ?shard= hands every shard back to the global key.
    const del = await call(`/v1/admin/throttle/${ch}`, { method: "DELETE", headers: adminHeaders() });
    expect(del.status).toBe(204);
    for (const t of [es, fr, de]) expect((await pub(ch, t, 3)).status).toBe(200);
  });

  it("the sweep gives a shard under its target its own 0 when its channel's rate would throttle it", async () => {
    const ch = `public:sharded.fast.${uniq()}`;
    const quiet = await member([ch], "quiet");
    for (let i = 0; i < 2; i++) expect((await pub(ch, quiet, i)).status).toBe(200);
    await setRate(ch, 1); // every shard, the quiet one included, now runs at 1 without a key of its own
    await backdatePeriod(shardKey(ch, "quiet"), 60_000); // 2 messages in a minute, far under 1/s
    await cron();
    expect(await env.THROTTLE_KV.get(rateKey(shardKey(ch, "quiet")))).toBe("0");
    expect(await env.THROTTLE_KV.get(rateKey(ch))).toBe("1");
  });

  it("the record of a dropped message says which shard", async () => {
    const ch = `public:sharded.${uniq()}`;
    const es = await member([ch], "es");
    const reader = await member([ANALYTICS], undefined, ["subscribe"]);
    await call(`/v1/admin/throttle/${ch}?shard=es`, {
      method: "PUT",
      headers: adminHeaders(),
      body: JSON.stringify({ rate: 1 }),
    });
    expect((await pub(ch, es, { lost: 1 })).status).toBe(202);
    const mine = async () =>
      (await historyOf(ANALYTICS, reader, "?limit=1000"))
        .map((f) => f.data as Record<string, unknown>)
        .filter((d) => d.source_channel === ch);
    await until(async () => (await mine()).length > 0, "the copy on the analytics channel");
    expect(await mine()).toMatchObject([{ source_channel: ch, shard: "es", message: { lost: 1 }, drop_rate: 1 }]);
    // Counted on the shard it was dropped in.
    await until(async () => {
      const shards = (await statsOf(ch)).shards as Record<string, { dropped_total: number }> | undefined;
      return shards?.es?.dropped_total === 1;
    }, "the drop counted on es");
  });

  it("the fast loop holds each shard's target on its own", async () => {
    const ch = `public:sharded.fast.${uniq()}`;
    const busy = await member([ch], "busy");
    const quiet = await member([ch], "quiet");
    // A period of 30 s at the 1/s target allows 30 messages: `busy` offers 4×, `quiet` a third.
    for (let i = 0; i < 120; i++) expect([200, 202]).toContain((await pub(ch, busy, i)).status);
    for (let i = 0; i < 10; i++) expect((await pub(ch, quiet, i)).status).toBe(200);
    for (const g of ["busy", "quiet"]) {
      const key = shardKey(ch, g);
      await runInDurableObject(stub(key), (instance) => {
        expect(counter(instance, "fast_due_at")).toBeGreaterThan(0);
        const now = Date.now();
        setCounters(instance, { fast_started_at: now - 30_000, fast_due_at: now });
      });
      await runDurableObjectAlarm(stub(key));
    }
    const busyRate = await runInDurableObject(stub(shardKey(ch, "busy")), fastRate);
    const quietRate = await runInDurableObject(stub(shardKey(ch, "quiet")), fastRate);
    expect(busyRate).toBeGreaterThan(0.6);
    expect(busyRate).toBeLessThan(0.85);
    expect(quietRate).toBe(0);
    // The Worker hears each shard's own rate with its next answer: the quiet shard's publishes all go through.
    for (let i = 0; i < 5; i++) expect((await pub(ch, quiet, i)).status).toBe(200);
    for (let i = 0; i < 5; i++) expect([200, 202]).toContain((await pub(ch, busy, i)).status);
    const stats = await statsOf(ch);
    const shards = stats.shards as Record<string, { drop_rate: number }>;
    expect(shards.quiet?.drop_rate).toBe(0);
    expect(shards.busy?.drop_rate).toBeGreaterThan(0.6);
  });
});

describe("the dashboard's overview", () => {
  it("shows a sharded channel as one card with its shards, each with its lever", async () => {
    const ch = `public:sharded.${uniq()}`;
    await pub(ch, await member([ch], "es"), 1);
    await pub(ch, await member([ch], "fr"), 2);
    const res = await call("/v1/admin/overview", { headers: adminHeaders() });
    expect(res.status).toBe(200);
    const { channels } = (await res.json()) as { channels: Record<string, unknown>[] };
    const mine = channels.filter((c) => c.channel === ch);
    expect(mine).toHaveLength(1);
    const card = mine[0] as { sharding: unknown; shards: { shard: string; lever: { points_to: string } }[] };
    expect(card.sharding).toEqual({ pattern: "public:sharded.*", by: "group" });
    expect(card.shards.map((s) => s.shard)).toEqual(["es", "fr"]);
    for (const s of card.shards) expect(s.lever.points_to).toBe("none");
  });

  it("points frequency to the throttle and occupancy to a shard, the one further past its mark", () => {
    const entry = (rate: number | null, occupancy: number | null, target: number | null) => ({
      channel: "public:a.b",
      last_seen_at: 0,
      occupancy,
      target_rate: target,
      last_sample: rate === null ? null : ({ offered_rate: rate } as unknown as ChannelSample),
    });
    expect(leverOf(entry(5, 10, null), null).points_to).toBe("none");
    expect(leverOf(entry(50, 10, null), null).points_to).toBe("throttle");
    expect(leverOf(entry(50, 10, 100), null).points_to).toBe("none");
    const crowd = leverOf(entry(5, 5000, null), null);
    expect(crowd.points_to).toBe("shard");
    expect(crowd.rule).toContain("if a grouping exists");
    expect(leverOf(entry(5, 5000, null), { pattern: "public:a.*", by: "group" }).rule).toContain("public:a.*");
    // Both past their marks: 30/s is 3× its 10/s, 5,000 subscribers 5× their 1,000.
    expect(leverOf(entry(30, 5000, null), null).points_to).toBe("shard");
    expect(leverOf(entry(80, 5000, null), null).points_to).toBe("throttle");
  });
});
