/**
 * A channel's storage is bounded by activity (docs/security.md): a channel nobody used for HISTORY_TTL,
 * a made-up name once its subscriber left, and Idempotency-Keys after 10 minutes are deleted by the
 * channel's alarm; reads of an unused name store nothing; an idle deletion that fails is retried.
 * Times are moved back in storage; alarms are run with runDurableObjectAlarm.
 */
import { evictDurableObject, runDurableObjectAlarm, runInDurableObject } from "cloudflare:test";
import { describe, expect, it } from "vitest";
import { UNUSED_CHANNEL_TTL_MS, WIPE_RETRY_MS } from "../../src/channel/idle-expiry";
import { backdateIdle, counter, lapseReservations } from "../support/channel-internals";
import {
  call,
  channelStats,
  channelObject as channelStub,
  type Frame,
  openSocket,
  publisher,
  publishTo,
  relayObject as relayStub,
  storedTables,
  uniq,
  until,
} from "../support/helpers";

describe("storage is bounded by activity", () => {
  const HISTORY_TTL_MS = 7 * 24 * 3600 * 1000;

  /** Moves the channel's last publish back by `ms`, in storage, and evicts so memory reloads it. */
  async function ageChannel(ch: string, ms: number): Promise<void> {
    const stub = channelStub(ch);
    await runInDurableObject(stub, (_i, state) => {
      state.storage.sql.exec("UPDATE counters SET value = value - ? WHERE name = 'last_publish_at'", ms);
    });
    await evictDurableObject(stub);
  }

  it("a channel nobody used for HISTORY_TTL is deleted whole by its alarm, and works again from scratch", async () => {
    const ch = `public:bounds.${uniq()}`;
    const t = await publisher("public:bounds.*");
    expect((await publishTo(ch, t, 1, { "idempotency-key": uniq("k") })).status).toBe(200);
    expect((await publishTo(ch, t, 2)).status).toBe(200);
    const stub = channelStub(ch);
    // Not idle long enough yet: the alarm keeps everything.
    expect(await runDurableObjectAlarm(stub)).toBe(true);
    expect(await storedTables(stub)).toMatchObject({ messages: 2, idempotency: 1 });
    await ageChannel(ch, HISTORY_TTL_MS + 1000);
    expect(await runDurableObjectAlarm(stub)).toBe(true);
    expect(await storedTables(stub)).toEqual({});
    expect(await runInDurableObject(stub, (_i, state) => state.storage.getAlarm())).toBeNull();
    // Reads of a deleted channel are empty, and it starts over at seq 1.
    const history = (await (await call(`/v1/history/${ch}`)).json()) as { messages: Frame[] };
    expect(history.messages).toEqual([]);
    const again = await publishTo(ch, t, 3);
    expect(((await again.json()) as { seq: number }).seq).toBe(1);
  });

  it("a sampler visit to a deleted channel leaves nothing stored, and export of an unused record is empty", async () => {
    const ch = `public:bounds.${uniq()}`;
    const t = await publisher("public:bounds.*");
    expect((await publishTo(ch, t, 1)).status).toBe(200);
    await ageChannel(ch, HISTORY_TTL_MS + 1000);
    const stub = channelStub(ch);
    expect(await runDurableObjectAlarm(stub)).toBe(true);
    expect(await storedTables(stub)).toEqual({});
    // The sampler visits channels with a runtime target every run, idle or not.
    const now = Date.now();
    expect(await stub.takePeriod(now, "5/s")).toMatchObject({ counts: { delivered: 0, dropped: 0 } });
    await stub.recordSample({ sampled_at: now, new_rate: 0, decided_by: "sweep" });
    expect(await storedTables(stub)).toEqual({});
    expect(await runInDurableObject(stub, (_i, state) => state.storage.getAlarm())).toBeNull();
  });

  it("a channel with a subscriber is kept however old its last publish; deleted once the subscriber leaves", async () => {
    const ch = `public:bounds.${uniq()}`;
    const t = await publisher("public:bounds.*");
    const sub = await openSocket(ch);
    expect((await publishTo(ch, t, 1)).status).toBe(200);
    await sub.next(1);
    await ageChannel(ch, HISTORY_TTL_MS + 1000);
    expect(await runDurableObjectAlarm(channelStub(ch))).toBe(true);
    expect(await storedTables(channelStub(ch))).toMatchObject({ messages: 1 });
    sub.ws.close();
    // The close reaches the relay, whose report reaches the channel, which sets its alarm for now:
    // the TTL is long past.
    let open = 1;
    for (let i = 0; i < 200 && open > 0; i++) {
      open = await runInDurableObject(channelStub(ch), (instance) => instance.stats().occupancy);
      if (open > 0) await new Promise((r) => setTimeout(r, 5));
    }
    expect(open).toBe(0);
    // Due now, so the runtime may already have run it by itself; run it if not.
    await runDurableObjectAlarm(channelStub(ch));
    expect(await storedTables(channelStub(ch))).toEqual({});
  });

  it("reading a channel nobody used stores nothing", async () => {
    const ch = `public:bounds.${uniq()}`;
    expect((await call(`/v1/history/${ch}`)).status).toBe(200);
    expect(await channelStats(ch)).toMatchObject({ last_seq: 0, occupancy: 0 });
    expect(await storedTables(channelStub(ch))).toEqual({});
  });

  it("Idempotency-Keys are forgotten after 10 minutes by the alarm, without any further traffic", async () => {
    const ch = `public:bounds.${uniq()}`;
    const t = await publisher("public:bounds.*");
    expect((await publishTo(ch, t, 1, { "idempotency-key": uniq("k") })).status).toBe(200);
    const stub = channelStub(ch);
    expect(await storedTables(stub)).toMatchObject({ idempotency: 1, messages: 1 });
    await runInDurableObject(stub, (_i, state) => {
      state.storage.sql.exec("UPDATE idempotency SET expires_at = ?", Date.now() - 1);
    });
    expect(await runDurableObjectAlarm(stub)).toBe(true);
    // The key is gone; the channel, recently used, keeps its history.
    expect(await storedTables(stub)).toMatchObject({ idempotency: 0, messages: 1 });
  });
});

describe("made-up channels leave nothing", () => {
  async function alarmOf(stub: DurableObjectStub): Promise<number | null> {
    return runInDurableObject(stub, (_i, state) => state.storage.getAlarm());
  }

  /** Every table in the object's database, the platform's own included: 0 is an object that stores nothing. */
  async function allTables(stub: DurableObjectStub): Promise<number> {
    return runInDurableObject(
      stub,
      (_i, state) =>
        state.storage.sql.exec<{ n: number }>("SELECT COUNT(*) AS n FROM sqlite_master WHERE type = 'table'").one().n,
    );
  }

  it("a subscribe to a name with no messages, once closed, leaves no channel or relay storage a minute later", async () => {
    const ch = `public:bounds.${uniq()}`;
    const stub = channelStub(ch);
    const sub = await openSocket(ch);
    await until(async () => (await runInDurableObject(stub, (i) => i.stats().occupancy)) === 1, "the relay's report");
    expect(await storedTables(stub)).toMatchObject({ relays: 1 });
    sub.ws.close();
    await until(async () => (await runInDurableObject(stub, (i) => i.stats().occupancy)) === 0, "the leave's report");
    // The relay, empty, deleted its storage once the channel told it to leave.
    await until(async () => (await allTables(relayStub(ch))) === 0, "the relay's deletion");
    expect(await alarmOf(relayStub(ch))).toBeNull();
    // The channel's alarm comes within a minute of the leave, not HISTORY_TTL after the first use.
    const left = Date.now();
    const alarm = await alarmOf(stub);
    expect(alarm).not.toBeNull();
    expect(alarm as number).toBeLessThanOrEqual(left + UNUSED_CHANNEL_TTL_MS);
    // Before the minute is up the channel is kept (a reconnect finds it as it was)...
    await runDurableObjectAlarm(stub);
    expect(await storedTables(stub)).toMatchObject({ counters: expect.any(Number) });
    // ...and once it has passed, everything is gone, the alarm included.
    await runInDurableObject(stub, (instance) => backdateIdle(instance, UNUSED_CHANNEL_TTL_MS + 1));
    expect(await runDurableObjectAlarm(stub)).toBe(true);
    expect(await allTables(stub)).toBe(0);
    expect(await alarmOf(stub)).toBeNull();
  });

  it("a subscribe that never reached its relay (its reserved slot lapses) leaves nothing a minute later", async () => {
    const ch = `public:bounds.${uniq()}`;
    const stub = channelStub(ch);
    await stub.assignRelay(ch, "local", 1000, "ip:test", {
      maxSubscribers: 100_000,
      maxPerClient: 20,
      maxAnonymous: 100_000,
      maxPerNet: 200,
    });
    expect(await storedTables(stub)).toMatchObject({ meta: 2 }); // its name and its epoch
    expect((await alarmOf(stub)) as number).toBeLessThanOrEqual(Date.now() + UNUSED_CHANNEL_TTL_MS);
    await runInDurableObject(stub, (instance) => {
      lapseReservations(instance);
      backdateIdle(instance, UNUSED_CHANNEL_TTL_MS + 1);
    });
    expect(await runDurableObjectAlarm(stub)).toBe(true);
    expect(await allTables(stub)).toBe(0);
    expect(await alarmOf(stub)).toBeNull();
  });

  it("a channel with a message keeps it for HISTORY_TTL after its last subscriber left, not a minute", async () => {
    const ch = `public:bounds.${uniq()}`;
    const stub = channelStub(ch);
    const sub = await openSocket(ch);
    expect((await publishTo(ch, await publisher("public:bounds.*"), 1)).status).toBe(200);
    await sub.next(1);
    sub.ws.close();
    await until(async () => (await runInDurableObject(stub, (i) => i.stats().occupancy)) === 0, "the leave's report");
    await runInDurableObject(stub, (instance) => backdateIdle(instance, UNUSED_CHANNEL_TTL_MS + 1));
    expect(await runDurableObjectAlarm(stub)).toBe(true);
    expect(await storedTables(stub)).toMatchObject({ messages: 1 });
  });

  it("history and stats reads of a name nobody used store nothing and set no alarm", async () => {
    const ch = `public:bounds.${uniq()}`;
    expect((await call(`/v1/history/${ch}?after=0`)).status).toBe(200);
    expect(await channelStats(ch)).toMatchObject({ last_seq: 0, occupancy: 0 });
    expect(await allTables(channelStub(ch))).toBe(0);
    expect(await alarmOf(channelStub(ch))).toBeNull();
  });
});

describe("an idle deletion that fails", () => {
  it("leaves the channel as it was, not deleted, and the alarm tries again", async () => {
    const ch = `public:bounds.${uniq()}`;
    expect((await publishTo(ch, await publisher("public:bounds.*"), 1)).status).toBe(200);
    const stub = channelStub(ch);
    const HISTORY_TTL_MS = 7 * 24 * 3600 * 1000;
    const failedAt = Date.now();
    await runInDurableObject(stub, async (instance, state) => {
      backdateIdle(instance, HISTORY_TTL_MS + 1000);
      const storage = state.storage as unknown as { deleteAll: () => Promise<void> };
      storage.deleteAll = () => Promise.reject(new Error("storage unavailable"));
      try {
        await instance.alarm();
      } finally {
        delete (storage as Partial<typeof storage>).deleteAll;
      }
      // Not marked deleted: memory still holds what storage holds.
      expect(counter(instance, "last_seq")).toBe(1);
    });
    expect(await storedTables(stub)).toMatchObject({ messages: 1 });
    const retry = await runInDurableObject(stub, (_i, state) => state.storage.getAlarm());
    expect(retry).not.toBeNull();
    expect(retry as number).toBeLessThanOrEqual(Date.now() + WIPE_RETRY_MS);
    expect(retry as number).toBeGreaterThanOrEqual(failedAt);
    // The retry deletes it.
    expect(await runDurableObjectAlarm(stub)).toBe(true);
    expect(await storedTables(stub)).toEqual({});
  });
});
