/**
 * Broadcast to a sharded channel and `Floodgate-Shard` (docs/api.md, "Shards"): the scopes and names
 * they need, which shards a broadcast reaches, never dropped by the throttle, and the bound on a
 * channel's shards.
 */
import { describe, expect, it } from "vitest";
import { shardKey } from "../../../functions/shard-key";
import { ChannelObject } from "../../../src/channel/channel-object";
import { MAX_SHARDS_PER_CHANNEL } from "../../../src/settings/shards";
import { member, payloads, pub, socket, statsOf, stub } from "../../support/audience-shards";
import { channelOf } from "../../support/channel-internals";
import {
  adminHeaders,
  call,
  type Frame,
  grown,
  historyOf,
  scrapeMetrics,
  storedTables,
  uniq,
  until,
  withFailing,
} from "../../support/helpers";

const DELIVERED = 'floodgate_messages_total{result="delivered"}';

describe("broadcast and Floodgate-Shard", () => {
  it("needs the broadcast scope (403), a shard name (400), and publishes into one named shard", async () => {
    const ch = `public:sharded.${uniq()}`;
    const plain = await member([ch], "es");
    const caster = await member([ch], "es", ["publish", "broadcast"]);
    for (const h of ["*", "fr"]) {
      const res = await pub(ch, plain, 1, { "floodgate-shard": h });
      expect(res.status).toBe(403);
      expect(await res.json()).toMatchObject({ code: "permission_denied", meta: { code: "PERMISSION_DENIED" } });
    }
    for (const h of ["FR", "", "a b", "x".repeat(33)]) {
      const res = await pub(ch, caster, 1, { "floodgate-shard": h });
      expect(res.status).toBe(400);
      expect(((await res.json()) as { msg: string }).msg).toMatch(/Floodgate-Shard/);
    }
    const fr = await member([ch], "fr");
    const res = await pub(ch, caster, "to fr", { "floodgate-shard": "fr" });
    expect(res.status).toBe(200);
    expect(await res.json()).toMatchObject({ shard: "fr", seq: 1 });
    expect(payloads(await historyOf(ch, fr))).toEqual(["to fr"]);
    expect(await historyOf(ch, plain)).toEqual([]);
    // Nothing refused changed anything: no shard holds any other message.
    expect((await statsOf(ch)).delivered_total).toBe(1);
  });

  it("reaches only shards with subscribers or history, and is never dropped by the throttle", async () => {
    const ch = `public:sharded.${uniq()}`;
    const es = await member([ch], "es");
    const caster = await member([ch], undefined, ["publish", "broadcast"]);
    const none = await pub(ch, caster, "nobody", { "floodgate-shard": "*" });
    expect(await none.json()).toMatchObject({ shards: [] });
    const listener = await socket(ch, null); // the default shard: a subscriber, no history
    await pub(ch, es, "first"); // es: history
    // Every shard drops everything: a broadcast still goes through.
    const put = await call(`/v1/admin/throttle/${ch}`, {
      method: "PUT",
      headers: adminHeaders(),
      body: JSON.stringify({ rate: 1 }),
    });
    expect(put.status).toBe(200);
    expect((await pub(ch, es, "dropped")).status).toBe(202);
    const res = await pub(ch, caster, "to all", { "floodgate-shard": "*" });
    expect(res.status).toBe(200);
    expect(await res.json()).toMatchObject({ status: "delivered", shards: ["default", "es"] });
    expect(payloads(await historyOf(ch, es))).toEqual(["first", "to all"]);
    await until(() => listener.frames.length >= 1, "the broadcast on the default shard");
    expect(payloads(listener.frames)).toEqual(["to all"]);
    listener.ws.close();
  });

  it("repeated with its Idempotency-Key, answers the first result again and is counted once", async () => {
    const ch = `public:sharded.${uniq()}`;
    const es = await member([ch], "es");
    const fr = await member([ch], "fr");
    await pub(ch, es, "es first");
    await pub(ch, fr, "fr first");
    const caster = await member([ch], undefined, ["publish", "broadcast"]);
    const headers = { "floodgate-shard": "*", "idempotency-key": "to-all-once" };
    const before = await scrapeMetrics();
    const first = await pub(ch, caster, "to all", headers);
    expect(first.status).toBe(200);
    const answer = (await first.json()) as { shards: string[]; published_at: number };
    expect(answer).toMatchObject({ status: "delivered", channel: ch, shards: ["es", "fr"] });
    const between = await scrapeMetrics();
    expect(grown(before, between)[DELIVERED]).toBe(2);
    // The retry comes later than the first: a published_at of its own would differ.
    await until(() => Date.now() > answer.published_at, "the clock to move past the first publish");
    const again = await pub(ch, caster, "to all", headers);
    expect(again.status).toBe(200);
    expect(await again.json()).toEqual(answer);
    // Nothing was delivered twice, so nothing more is counted delivered.
    expect(grown(between, await scrapeMetrics())[DELIVERED]).toBeUndefined();
    expect(payloads(await historyOf(ch, es))).toEqual(["es first", "to all"]);
    expect(payloads(await historyOf(ch, fr))).toEqual(["fr first", "to all"]);
  });

  it("retried after one shard failed, delivers only into that shard and counts each shard's delivery once", async () => {
    const ch = `public:sharded.${uniq()}`;
    const es = await member([ch], "es");
    const fr = await member([ch], "fr");
    await pub(ch, es, "es first");
    await pub(ch, fr, "fr first");
    const caster = await member([ch], undefined, ["publish", "broadcast"]);
    const headers = { "floodgate-shard": "*", "idempotency-key": "to-all-retried" };
    const frames = async (shard: string) =>
      (await stub(shardKey(ch, shard)).history(null, 10)).map((f) => JSON.parse(f) as Frame);
    const before = await scrapeMetrics();
    const failed = await withFailing(
      ChannelObject,
      "broadcastOne",
      "SQLITE_BUSY: internal detail",
      () => pub(ch, caster, "to all", headers),
      (o) => channelOf(o) === shardKey(ch, "fr"),
    );
    expect(failed.status).toBe(503);
    // The shard that took it is counted, though the broadcast as a whole failed.
    const between = await scrapeMetrics();
    expect(grown(before, between)[DELIVERED]).toBe(1);
    const [, esCopy] = await frames("es");
    expect(esCopy?.data).toBe("to all");
    await until(() => Date.now() > (esCopy?.published_at ?? 0), "the clock to move past the first delivery");
    const again = await pub(ch, caster, "to all", headers);
    expect(again.status).toBe(200);
    // The answer is the broadcast's first delivery time; the shard that took it only now has its own.
    expect(await again.json()).toEqual({
      status: "delivered",
      channel: ch,
      shards: ["es", "fr"],
      published_at: esCopy?.published_at,
    });
    expect(grown(between, await scrapeMetrics())[DELIVERED]).toBe(1);
    expect(payloads(await frames("es"))).toEqual(["es first", "to all"]);
    const frCopies = await frames("fr");
    expect(payloads(frCopies)).toEqual(["fr first", "to all"]);
    expect(frCopies[1]?.published_at).toBeGreaterThan(esCopy?.published_at ?? 0);
  });

  it("bounds a channel's registry: past the bound a new shard answers 503", async () => {
    const ch = `public:sharded.${uniq()}`;
    const registry = stub(ch);
    for (let i = 0; i < MAX_SHARDS_PER_CHANNEL; i++)
      expect(await registry.registerShard(ch, `g${i}`, Date.now())).toBe(true);
    expect(await registry.registerShard(ch, "one-more", Date.now())).toBe(false);
    const late = await member([ch], "one-more");
    expect((await pub(ch, late, 1)).status).toBe(503);
    const listed = await member([ch], "g3");
    expect((await pub(ch, listed, 1)).status).toBe(200);
    expect(await stub(shardKey(ch, "one-more")).history(null, 10)).toEqual([]);
    // A broadcast reaches the one listed shard with history and forgets the listed ones with nothing.
    const caster = await member([ch], undefined, ["publish", "broadcast"]);
    const res = await pub(ch, caster, "all", { "floodgate-shard": "*" });
    expect(await res.json()).toMatchObject({ shards: ["g3"] });
    expect(await registry.shardNames()).toEqual(["g3"]);
    for (const g of ["g0", "g4"]) expect(await storedTables(stub(shardKey(ch, g)))).toEqual({});
  });
});
