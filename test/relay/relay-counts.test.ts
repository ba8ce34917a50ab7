/**
 * Relays counted and let go (docs/api.md, "Relays"), RELAY_CAPACITY 10, real sockets in workerd:
 * empty relays leave and keep nothing, a relay that left takes no position from a late delivery, a
 * lapsed reservation's relay leaves, a reset relay's subscribers stop counting, MAX_SUBSCRIBERS
 * answers 503, and stats and the sampler's delivery budget count every relay.
 */
import { createExecutionContext, runDurableObjectAlarm, runInDurableObject } from "cloudflare:test";
import { describe, expect, it } from "vitest";
import worker from "../../src/index";
import { lapseRelayReservations, relayReservations } from "../support/channel-internals";
import {
  BASE,
  envWith,
  freshIp,
  openSocket,
  publisher,
  publishTo,
  storedTables,
  uniq,
  until,
} from "../support/helpers";
import {
  CAPACITY,
  channelStub,
  openSockets,
  openSse,
  relayEnv,
  relayStub,
  seqs,
  settled,
  stats,
} from "../support/relay-fixtures";

/** A slot on `ch`'s relay whose subscriber never reaches it (its client went away on the way there). */
async function reserveStraySlot(ch: string): Promise<void> {
  await channelStub(ch).assignRelay(ch, "local", CAPACITY, "ip:test", {
    maxSubscribers: 100_000,
    maxPerClient: 20,
    maxAnonymous: 100_000,
    maxPerNet: 200,
  });
}

describe("counts", () => {
  it("empty relays leave the registry and keep no storage", async () => {
    const ch = `public:relays.${uniq()}`;
    const t = await publisher("public:relays.*");
    const subs = await openSockets(ch, 15);
    const sse = await openSse(ch);
    expect((await publishTo(ch, t, 1)).status).toBe(200);
    for (const s of subs) await s.next(1);
    expect(await storedTables(relayStub(ch, 0))).toMatchObject({ relay: 1 });
    for (const s of subs) s.ws.close();
    await sse.close();
    await until(async () => (await stats(ch)).relays === 0, "the relays to leave");
    expect(await stats(ch)).toMatchObject({ occupancy: 0, websockets: 0, sse: 0, relays: 0 });
    for (const k of [0, 1])
      await until(
        async () => Object.keys(await storedTables(relayStub(ch, k))).length === 0,
        `relay ${k} to delete its storage`,
      );
    expect(await storedTables(channelStub(ch))).toMatchObject({ relays: 0 });
    // Still works from scratch: a new subscriber opens relay 0 again.
    const again = await openSocket(ch, "", relayEnv);
    expect((await publishTo(ch, t, 2)).status).toBe(200);
    expect(seqs(await again.next(1))).toEqual([2]);
    again.ws.close();
    await settled(ch);
  });

  it("a relay that left takes no position from a delivery sent before the channel heard it leave", async () => {
    const ch = `public:relays.${uniq()}`;
    const t = await publisher("public:relays.*");
    const sub = await openSocket(ch, "", relayEnv);
    expect((await publishTo(ch, t, 1)).status).toBe(200);
    await sub.next(1);
    sub.ws.close();
    await settled(ch, 1);
    // A batch the channel's line still had on its way when the relay left.
    const frame = { seq: 2, text: JSON.stringify({ type: "message", channel: ch, seq: 2, data: 2 }) };
    await relayStub(ch, 0).deliver([frame], 2);
    expect(await runInDurableObject(relayStub(ch, 0), (r) => r.counts())).toEqual({
      websockets: 0,
      sse: 0,
      last_seq: null,
    });
    expect(Object.keys(await storedTables(relayStub(ch, 0)))).toHaveLength(0);
    // And a subscriber that comes later still gets everything after its floor, on relay 0 again.
    const again = await openSocket(ch, "?after=0", relayEnv);
    expect(seqs(await again.next(1))).toEqual([1]);
    expect((await publishTo(ch, t, 3)).status).toBe(200);
    expect(seqs(await again.next(2))).toEqual([1, 2]);
    again.ws.close();
    await settled(ch, 1);
  });

  it("a relay kept empty for a reserved slot whose subscriber never came leaves once the slot lapses", async () => {
    const ch = `public:relays.${uniq()}`;
    const t = await publisher("public:relays.*");
    const a = await openSocket(ch, "", relayEnv);
    await reserveStraySlot(ch);
    a.ws.close();
    await until(async () => (await stats(ch)).occupancy === 0, "the subscriber's leave to be counted");
    expect((await stats(ch)).relays).toBe(1); // kept while the slot is reserved
    await lapseRelayReservations(ch);
    // The next batch finds the relay empty; its report is answered "leave".
    expect((await publishTo(ch, t, 1)).status).toBe(200);
    await settled(ch, 1);
  });

  it("on a quiet channel, a relay kept empty for a reserved slot asks again by its alarm when the slot lapses, and leaves", async () => {
    const ch = `public:relays.${uniq()}`;
    const a = await openSocket(ch, "", relayEnv);
    await reserveStraySlot(ch);
    const [lapsesAt] = await runInDurableObject(channelStub(ch), (o) =>
      relayReservations(o).flatMap((reservations) => [...reservations.values()].map((r) => r.until)),
    );
    a.ws.close();
    await until(async () => (await stats(ch)).occupancy === 0, "the subscriber's leave to be counted");
    expect((await stats(ch)).relays).toBe(1); // kept while the slot is reserved
    // Nobody publishes: the relay's own alarm is set for when the slot lapses.
    await until(async () => {
      const alarm = await runInDurableObject(relayStub(ch, 0), (_r, state) => state.storage.getAlarm());
      return alarm !== null && alarm <= (lapsesAt as number);
    }, "the relay's alarm set for the slot's lapse");
    await lapseRelayReservations(ch);
    expect(await runDurableObjectAlarm(relayStub(ch, 0))).toBe(true);
    await settled(ch, 1);
    expect((await stats(ch)).relays).toBe(0);
  });

  it("a relay reset on a quiet channel does not keep its dropped subscribers counted against MAX_SUBSCRIBERS", async () => {
    const ch = `public:relays.${uniq()}`;
    const capped = envWith({ RELAY_CAPACITY: String(CAPACITY), MAX_SUBSCRIBERS: "1", ANONYMOUS_SHARE: "1" });
    const a = await openSocket(ch, "", capped);
    await expect(
      runInDurableObject(relayStub(ch, 0), (_r, state) => {
        state.abort("reset for the test");
      }),
    ).rejects.toThrow();
    await until(() => a.ws.readyState !== WebSocket.OPEN, "the reset relay's socket to drop");
    // No publish wakes the relay. A refused subscribe wakes every relay, so the reset one reports
    // its true count and the place is free again (a client retries after Retry-After).
    let res: Response | null = null;
    await until(async () => {
      res = await worker.fetch(
        new Request(`${BASE}/v1/subscribe/${ch}`, { headers: { upgrade: "websocket", "cf-connecting-ip": freshIp() } }),
        capped,
        createExecutionContext(),
      );
      return res.status === 101;
    }, "a subscribe to be let in");
    const ws = (res as unknown as Response).webSocket as WebSocket;
    ws.accept();
    expect(await stats(ch)).toMatchObject({ occupancy: 1, websockets: 1, relays: 1 });
    ws.close();
    await settled(ch, 1);
  });

  it("past MAX_SUBSCRIBERS a subscribe answers 503 unavailable with Retry-After, before any upgrade", async () => {
    const ch = `public:relays.${uniq()}`;
    const capped = envWith({ RELAY_CAPACITY: "2", MAX_SUBSCRIBERS: "3", ANONYMOUS_SHARE: "1" });
    const subs = await openSockets(ch, 3, capped);
    const modes: Record<string, string>[] = [{ upgrade: "websocket" }, { accept: "text/event-stream" }];
    for (const headers of modes) {
      const res = await worker.fetch(
        new Request(`${BASE}/v1/subscribe/${ch}`, { headers: { ...headers, "cf-connecting-ip": freshIp() } }),
        capped,
        createExecutionContext(),
      );
      expect(res.status).toBe(503);
      expect(res.webSocket).toBeNull();
      expect(Number(res.headers.get("retry-after"))).toBeGreaterThanOrEqual(1);
      expect(await res.json()).toMatchObject({ code: "unavailable", meta: { code: "UNAVAILABLE" } });
    }
    expect(await stats(ch)).toMatchObject({ occupancy: 3, relays: 2 });
    // A leave frees a place.
    subs[0]?.ws.close();
    await until(async () => (await stats(ch)).occupancy === 2, "the leave to be counted");
    subs.push(await openSocket(ch, "", capped));
    for (const s of subs.slice(1)) s.ws.close();
    await settled(ch);
  });

  it("stats and the sampler's delivery budget count the subscribers of every relay", async () => {
    // public:budget.* has the delivery budget {"deliveries":"40/s"} in the test configuration.
    const ch = `public:budget.${uniq()}`;
    const subs = await openSockets(ch, 20);
    const streams = [];
    for (let i = 0; i < 5; i++) streams.push(await openSse(ch));
    const s = await stats(ch);
    expect(s).toMatchObject({ occupancy: 25, websockets: 20, sse: 5, relays: 3 });
    expect(s.target_rate).toBeCloseTo(40 / 25, 5);
    const period = await runInDurableObject(channelStub(ch), (o) => o.takePeriod(Date.now()));
    expect(period.counts.occupancy).toBe(25);
    for (const x of subs) x.ws.close();
    for (const x of streams) await x.close();
    await settled(ch);
  });
});
