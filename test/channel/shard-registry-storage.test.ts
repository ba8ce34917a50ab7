/**
 * A sharded channel's registry of shards (src/channel/shard-registry.ts) in storage: it outlives every
 * shard's history, then goes with idle expiry, and forgets a shard that deleted itself as idle.
 */
import { runDurableObjectAlarm, runInDurableObject } from "cloudflare:test";
import { describe, expect, it } from "vitest";
import { shardKey } from "../../functions/shard-key";
import { UNUSED_CHANNEL_TTL_MS } from "../../src/channel/idle-expiry";
import { SHARD_REFRESH_MS } from "../../src/channel/shard-registry";
import { member, pub, stub } from "../support/audience-shards";
import { setCounters } from "../support/channel-internals";
import { storedTables, uniq, until } from "../support/helpers";

describe("the shard registry's storage", () => {
  const HISTORY_TTL_MS = 7 * 24 * 3600_000; // the shipped HISTORY_TTL
  /** Moves a channel object's idle clock (last publish and last shard report) to `at`. */
  const idleSince = (key: string, at: number) =>
    runInDurableObject(stub(key), (instance) => setCounters(instance, { last_publish_at: at, shards_seen_at: at }));

  it("outlives every shard's history, then goes with idle expiry", async () => {
    const ch = `public:sharded.${uniq()}`;
    const base = stub(ch);
    expect(await base.registerShard(ch, "es", Date.now())).toBe(true);
    // Not a made-up name's minute, nor HISTORY_TTL alone: a shard keeps history that long after its last publish.
    for (const ago of [UNUSED_CHANNEL_TTL_MS + 1, HISTORY_TTL_MS + 1]) {
      await idleSince(ch, Date.now() - ago);
      expect(await runDurableObjectAlarm(base)).toBe(true); // the alarm ran
      expect(await base.shardNames()).toEqual(["es"]);
    }
    await idleSince(ch, Date.now() - HISTORY_TTL_MS - SHARD_REFRESH_MS - 1);
    await runDurableObjectAlarm(base);
    expect(await base.shardNames()).toEqual([]);
    expect(await storedTables(base)).toEqual({});
  });

  it("forgets a shard that deleted itself as idle", async () => {
    const ch = `public:sharded.${uniq()}`;
    const es = await member([ch], "es");
    const fr = await member([ch], "fr");
    await pub(ch, es, 1);
    await pub(ch, fr, 1);
    expect(await stub(ch).shardNames()).toEqual(["es", "fr"]);
    const key = shardKey(ch, "es");
    await runInDurableObject(stub(key), (instance) =>
      setCounters(instance, { last_publish_at: Date.now() - HISTORY_TTL_MS - 1 }),
    );
    await runDurableObjectAlarm(stub(key));
    expect(await storedTables(stub(key))).toEqual({});
    await until(async () => (await stub(ch).shardNames()).length === 1, "es leaving the registry");
    expect(await stub(ch).shardNames()).toEqual(["fr"]);
  });
});
