/**
 * A connection host's lanes keep their last seq through hibernation (src/connection-host/lane-seq.ts):
 * in one subscribed connection's attachment, not in the lane's row with every batch; in the row when
 * no connection has room. Real Pusher connections through the Worker, the host evicted as the runtime
 * evicts an idle one (its sockets hibernate). The channel's count reports fail meanwhile, so the
 * lane's row is not rewritten with them: only where the seq is kept tells the host where each lane
 * stood, and a seq kept nowhere repeats the messages before it (the lane fetches them again).
 */
import { runInDurableObject } from "cloudflare:test";
import { afterEach, describe, expect, it } from "vitest";
import { ChannelObject } from "../../src/channel/channel-object";
import type { ConnectionHost } from "../../src/connection-host/connection-host";
import { SEQ_ROOM_BYTES } from "../../src/connection-host/connections";
import { HostStore } from "../../src/connection-host/host-store";
import { connectionHostStub } from "../../src/platform/stubs";
import { env, uniq, until, withFailing } from "../support/helpers";
import { attachmentOf, evictHostOf, hostOf } from "../support/host-internals";
import { closePushers, got, numbers, openPusher, publishEvent, pusherPublisher } from "../support/pusher";

afterEach(closePushers);

/** Runs `run` while every channel refuses its relays' and hosts' count reports. */
function withReportsFailing<T>(run: () => Promise<T>): Promise<T> {
  return withFailing(ChannelObject, "relayReport", "channel unavailable", run);
}

/** The subscriptions a host holds on channel `key` now. */
async function subscriptionsOn(host: string, key: string): Promise<number> {
  const stats = await runInDurableObject(connectionHostStub(env, host), (h: ConnectionHost) => h.hostStats());
  return stats.channels.find((c) => c.channel === key)?.subscriptions ?? 0;
}

const range = (from: number, to: number) => Array.from({ length: to - from + 1 }, (_, i) => from + i);

describe("a connection host's lane seq", () => {
  it("a host evicted mid-stream continues every connection with no gap or repeat", async () => {
    const name = uniq("seq-");
    const t = await pusherPublisher();
    const subs = [await openPusher(), await openPusher(), await openPusher()];
    for (const p of subs) expect((await p.subscribe(name)).event).toBe("pusher_internal:subscription_succeeded");
    await withReportsFailing(async () => {
      for (let i = 1; i <= 3; i++) await publishEvent(name, t, i);
      for (const p of subs) await got(p, name, 3);
      expect(await evictHostOf(subs[0]?.socketId ?? "")).toBe(true);
    });
    for (let i = 4; i <= 6; i++) await publishEvent(name, t, i);
    for (const p of subs) {
      await got(p, name, 6);
      expect(numbers(p, name)).toEqual(range(1, 6));
    }
  });

  it("moves to another connection when the one holding it closes: evicted then, the host repeats nothing", async () => {
    const name = uniq("anchor-");
    const key = `pusher:${name}`;
    const t = await pusherPublisher();
    const subs = [];
    for (let i = 0; i < 6; i++) subs.push(await openPusher());
    for (const p of subs) expect((await p.subscribe(name)).event).toBe("pusher_internal:subscription_succeeded");
    const host = await hostOf(subs[0]?.socketId ?? "");
    expect(host).not.toBeNull();
    for (const p of subs) expect(await hostOf(p.socketId)).toBe(host);
    for (let i = 1; i <= 3; i++) await publishEvent(name, t, i);
    for (const p of subs) await got(p, name, 3);
    // One connection holds the lane's seq; the one left is from the middle, so the one holding it is
    // among those closed whichever end the host chose from.
    const holders = [];
    for (const p of subs) if ((await attachmentOf(p.socketId))?.seqs?.[key]) holders.push(p);
    expect(holders).toHaveLength(1);
    const [kept] = subs.splice(3, 1);
    if (!kept) throw new Error("no connection left");
    await withReportsFailing(async () => {
      for (const p of subs) p.ws.close();
      await until(
        async () => (await subscriptionsOn(host as string, key)) === 1,
        "the host to see five connections close",
      );
      expect((await attachmentOf(kept.socketId))?.seqs?.[key]?.[0]).toBe(3);
      expect(await evictHostOf(kept.socketId)).toBe(true);
    });
    for (let i = 4; i <= 6; i++) await publishEvent(name, t, i);
    await got(kept, name, 6);
    expect(numbers(kept, name)).toEqual(range(1, 6));
  });

  it("a connection holds the seqs of as many lanes as its room takes; the lanes past it keep theirs in their rows", async () => {
    // Names of 150 characters: a few lanes fill one connection's room.
    const names = Array.from({ length: 8 }, (_, i) => `${uniq(`room${i}-`)}-${"x".repeat(130)}`);
    const t = await pusherPublisher();
    const p = await openPusher();
    for (const name of names) expect((await p.subscribe(name)).event).toBe("pusher_internal:subscription_succeeded");
    await withReportsFailing(async () => {
      for (const name of names) for (let i = 1; i <= 3; i++) await publishEvent(name, t, i);
      for (const name of names) await got(p, name, 3);
      const held = Object.keys((await attachmentOf(p.socketId))?.seqs ?? {});
      const fits = Math.floor(SEQ_ROOM_BYTES / (`pusher:${names[0]}`.length + 32));
      expect(held).toHaveLength(fits);
      expect(fits).toBeLessThan(names.length);
      expect(await evictHostOf(p.socketId)).toBe(true);
    });
    for (const name of names) for (let i = 4; i <= 6; i++) await publishEvent(name, t, i);
    for (const name of names) {
      await got(p, name, 6);
      expect(numbers(p, name), name).toEqual(range(1, 6));
    }
    // Still a connection that answers (its attachment, seqs and all, is written as it speaks).
    await p.barrier();
  });

  it("a host whose tables an older version made reads its lanes at generation 0 and stores generations", async () => {
    const stub = connectionHostStub(env, `host:local:${uniq("old-")}`);
    const lanes = await runInDurableObject(stub, (_h: ConnectionHost, state) => {
      const sql = state.storage.sql;
      // The tables as the version before lane seqs made them.
      sql.exec(
        "CREATE TABLE host (id INTEGER PRIMARY KEY CHECK (id = 1), name TEXT NOT NULL, grp TEXT NOT NULL, k INTEGER NOT NULL)",
      );
      sql.exec(
        "CREATE TABLE lanes (channel TEXT PRIMARY KEY, last_seq INTEGER NOT NULL, reported INTEGER NOT NULL DEFAULT 0)",
      );
      sql.exec("INSERT INTO host (id, name, grp, k) VALUES (1, 'host:local:9', 'local', 9)");
      sql.exec("INSERT INTO lanes (channel, last_seq, reported) VALUES ('pusher:old', 7, 2)");
      const store = new HostStore(sql);
      const before = store.restored()?.lanes;
      store.storeLane("pusher:new", 3, 1, 1234);
      return { before, after: store.restored()?.lanes };
    });
    expect(lanes.before).toEqual([{ channel: "pusher:old", last_seq: 7, reported: 2, generation: 0 }]);
    expect(lanes.after).toContainEqual({ channel: "pusher:new", last_seq: 3, reported: 1, generation: 1234 });
  });
});
