/**
 * How many channels one connection host serves (docs/operations.md, "The Pusher door: how it
 * scales"; src/connection-host/lane-room.ts): past its most lanes a subscribe to a channel it does
 * not serve yet is refused (503 subscription_error, counted as `host_full`) and changes nothing,
 * while channels it serves still take subscribers; its directory hears it full, so a new connection
 * goes to another host; a lane that closes makes room again; a directory whose table an older version
 * made keeps its hosts and takes their lane loads. The room's own accounting is tested on a plain
 * map, where concurrent subscribes to new channels must not overfill it.
 */
import { evictDurableObject, runDurableObjectAlarm, runInDurableObject } from "cloudflare:test";
import { env } from "cloudflare:workers";
import { afterEach, describe, expect, it } from "vitest";
import type { RelayEntry } from "../../src/channel/relay-registry";
import { HOST_FULL_STATUS, hostConnectRequest } from "../../src/connection-host/calls";
import { HOST_MAX_LANES, LaneRoom } from "../../src/connection-host/lane-room";
import type { HostDirectory } from "../../src/host-directory/host-directory";
import { channelStub, connectionHostStub, hostDirectoryStub } from "../../src/platform/stubs";
import { lapseRelayReservations } from "../support/channel-internals";
import { adminHeaders, call, refusalsGrown, scrapeMetrics, uniq, until } from "../support/helpers";
import { hostOf, laneLoadInDirectory, leaveLaneRoom } from "../support/host-internals";
import { closePushers, openPusher, type PusherSocket } from "../support/pusher";

/** Hosts whose room a test lowered: put back after it, for any test that lands there next. */
const lowered = new Set<string>();

afterEach(async () => {
  await closePushers();
  for (const host of lowered) await leaveLaneRoom(host, HOST_MAX_LANES, { absolute: true });
  lowered.clear();
});

/** The channel keys `host` serves now. */
async function lanesOf(host: string): Promise<string[]> {
  return (await connectionHostStub(env, host).hostStats()).channels.map((c) => c.channel);
}

async function websocketsOf(channel: string): Promise<number> {
  const res = await call(`/v1/channels/${channel}/stats`, { headers: adminHeaders() });
  return ((await res.json()) as { websockets: number }).websockets;
}

/** A connection, and its host with room left for `more` lanes. */
async function onHostWithRoomFor(more: number): Promise<{ p: PusherSocket; host: string }> {
  const p = await openPusher();
  await until(async () => (await hostOf(p.socketId)) !== null, "the connection's host in its directory");
  const host = (await hostOf(p.socketId)) as string;
  lowered.add(host);
  await leaveLaneRoom(host, more);
  return { p, host };
}

describe("a connection host's channels", () => {
  it("past its most lanes, a subscribe to a new channel is 503 host_full and changes nothing; its channels still take subscribers", async () => {
    // Both connections first: once its lanes are full, the directory places new ones elsewhere.
    const other = await openPusher();
    const { p, host } = await onHostWithRoomFor(2);
    expect(await hostOf(other.socketId)).toBe(host);
    const [a, b, c] = [uniq("room-a-"), uniq("room-b-"), uniq("room-c-")];
    expect((await p.subscribe(a)).event).toBe("pusher_internal:subscription_succeeded");
    expect((await p.subscribe(b)).event).toBe("pusher_internal:subscription_succeeded");
    const before = await scrapeMetrics();
    expect(await p.subscribe(c)).toEqual({
      event: "pusher:subscription_error",
      channel: c,
      data: {
        type: "Unavailable",
        error: "this connection's host serves as many channels as it can; reconnect",
        status: 503,
      },
    });
    expect(refusalsGrown(before, await scrapeMetrics())).toEqual({ 'floodgate_refusals_total{reason="host_full"}': 1 });
    expect(await websocketsOf(`pusher:${c}`)).toBe(0);
    expect((await lanesOf(host)).sort()).toEqual([`pusher:${a}`, `pusher:${b}`].sort());
    // A channel the host serves fits, from another connection of the same host as well.
    expect((await other.subscribe(a)).event).toBe("pusher_internal:subscription_succeeded");
    expect(await websocketsOf(`pusher:${a}`)).toBe(2);
  });

  it("a host whose lanes are full is full to its directory: a new connection goes to another host", async () => {
    const { p, host } = await onHostWithRoomFor(1);
    expect((await p.subscribe(uniq("full-"))).event).toBe("pusher_internal:subscription_succeeded");
    // 1,000 connections' worth (RELAY_CAPACITY) beyond the one it holds.
    await until(async () => (await laneLoadInDirectory(host)) === 999, "the host's lanes in its directory");
    const next = await openPusher();
    const nextHost = await hostOf(next.socketId);
    expect(nextHost).not.toBeNull();
    expect(nextHost).not.toBe(host);
  });

  it("a host whose lanes are full refuses a connection a directory behind its count places there", async () => {
    const { p, host } = await onHostWithRoomFor(1);
    expect((await p.subscribe(uniq("last-"))).event).toBe("pusher_internal:subscription_succeeded");
    // What the Worker sends a host once its directory placed a connection there.
    const placed = hostConnectRequest(
      {
        host,
        group: "local",
        k: Number(host.split(":").at(-1)),
        reservation: "",
        client: "ip:203.0.113.99",
        lease: "",
        continent: null,
        capacity: 1000,
        publicOnly: false,
      },
      new Request("https://floodgate.test/app/key", { headers: { upgrade: "websocket" } }),
    );
    const res = await connectionHostStub(env, host).fetch(placed);
    expect(res.status).toBe(HOST_FULL_STATUS);
    expect(res.webSocket).toBeNull();
  });

  it("a lane that closes makes room for another channel", async () => {
    const { p, host } = await onHostWithRoomFor(1);
    const [first, second] = [uniq("first-"), uniq("second-")];
    expect((await p.subscribe(first)).event).toBe("pusher_internal:subscription_succeeded");
    expect((await p.subscribe(second)).event).toBe("pusher:subscription_error");
    p.send({ event: "pusher:unsubscribe", data: { channel: first } });
    // The lane goes when its channel has heard it is empty.
    await until(async () => (await lanesOf(host)).length === 0, "the empty lane gone");
    expect((await p.subscribe(second)).event).toBe("pusher_internal:subscription_succeeded");
  });
});

describe("a lane kept for a subscriber that never came", () => {
  it("on a quiet channel, leaves by its host's alarm once the channel's reserved slot lapses", async () => {
    const p = await openPusher();
    await until(async () => (await hostOf(p.socketId)) !== null, "the connection's host in its directory");
    const host = (await hostOf(p.socketId)) as string;
    const name = uniq("kept-");
    const key = `pusher:${name}`;
    expect((await p.subscribe(name)).event).toBe("pusher_internal:subscription_succeeded");
    // A slot on this host whose subscription never reaches its lane (its connection went away).
    const k = Number(host.split(":").at(-1));
    await channelStub(env, key).assignHost(key, host, "local", k, "ip:203.0.113.7", {
      maxSubscribers: 100_000,
      maxPerClient: 100,
      maxAnonymous: 100_000,
      maxPerNet: 1_000,
    });
    p.send({ event: "pusher:unsubscribe", data: { channel: name } });
    await until(async () => (await websocketsOf(key)) === 0, "the unsubscribe counted");
    expect(await lanesOf(host)).toEqual([key]); // kept while the slot is reserved
    await lapseRelayReservations(key);
    // Nothing is published: only the host's alarm can find the lane empty for nobody.
    await runDurableObjectAlarm(connectionHostStub(env, host));
    await until(async () => (await lanesOf(host)).length === 0, "the empty lane gone");
  });
});

describe("a host's directory", () => {
  it("tells a host with no connection, kept for a connection on its way, when that place lapses; then it leaves", async () => {
    const stub = hostDirectoryStub(env, `hosts:${uniq("kept-")}`);
    const report = (host: string, k: number) => ({
      relay: host,
      group: "kept",
      k,
      websockets: 0,
      sse: 0,
      clients: [],
      joined: [],
      slowClosed: 0,
    });
    await runInDurableObject(stub, (d: HostDirectory) => {
      const first = d.place("kept", 1000);
      d.relayReport("hosts:kept", { ...report(first.host, first.k), websockets: 1, joined: [first.reservation] });
      // A second connection placed there never arrives; the first leaves.
      d.place("kept", 1000);
      const answer = d.relayReport("hosts:kept", report(first.host, first.k));
      expect(answer.leave).toBe(false);
      expect(answer.askAgainAt).toBeGreaterThan(Date.now());
      const hosts = (d as unknown as { hosts: { entries: Map<string, RelayEntry> } }).hosts;
      for (const e of hosts.entries.values())
        for (const [id, r] of e.reservations) e.reservations.set(id, { ...r, until: 0 });
      expect(d.relayReport("hosts:kept", report(first.host, first.k))).toEqual({ leave: true, head: 0 });
      expect(d.hostsNow()).toEqual([]);
    });
  });
});

describe("a directory an older version made", () => {
  it("keeps its hosts, and stores and reads back their lane loads", async () => {
    const stub = hostDirectoryStub(env, `hosts:${uniq("old-")}`);
    await runInDurableObject(stub, (_d: HostDirectory, state) => {
      const sql = state.storage.sql;
      // The table as the version before lane loads made it.
      sql.exec("DROP TABLE hosts");
      sql.exec(
        "CREATE TABLE hosts (name TEXT PRIMARY KEY, grp TEXT NOT NULL, k INTEGER NOT NULL, connections INTEGER NOT NULL)",
      );
      sql.exec("INSERT INTO hosts (name, grp, k, connections) VALUES ('host:old:0', 'old', 0, 3)");
    });
    await evictDurableObject(stub);
    expect(await stub.hostsNow()).toEqual([{ host: "host:old:0", connections: 3 }]);
    // The old host reports lanes worth 997 connections more: full at 1,000, so the next goes to k = 1.
    await stub.relayReport("hosts:old", {
      relay: "host:old:0",
      group: "old",
      k: 0,
      websockets: 3,
      sse: 997,
      clients: [],
      joined: [],
      slowClosed: 0,
    });
    await evictDurableObject(stub);
    expect((await stub.place("old", 1000)).host).toBe("host:old:1");
  });
});

describe("a host's room for lanes", () => {
  it("holds room for subscribes on their way, so concurrent ones to new channels cannot overfill it", () => {
    const lanes = new Map<string, unknown>([["a", {}]]);
    const room = new LaneRoom(lanes, 3);
    const b1 = room.take("b");
    const c = room.take("c");
    // One lane and b and c on their way: a fourth channel does not fit, the channels there do.
    expect(room.take("d")).toBeNull();
    const a = room.take("a");
    const b2 = room.take("b");
    expect([b1, c, a, b2].every((r) => r !== null)).toBe(true);
    // b's lane opens: counted once, as a lane.
    lanes.set("b", {});
    room.opened("b");
    expect(room.used).toBe(3);
    b1?.();
    b2?.();
    a?.();
    expect(room.used).toBe(3);
    // c's subscribe was refused by its channel: its room comes back.
    c?.();
    expect(room.used).toBe(2);
    // Giving back twice changes nothing, even with another subscribe to c on its way.
    const c2 = room.take("c");
    c?.();
    expect(room.used).toBe(3);
    c2?.();
    expect(room.used).toBe(2);
    expect(room.take("d")).not.toBeNull();
    expect(room.take("e")).toBeNull();
  });

  it("a lane that closes while a subscribe to it is on its way keeps its room for that subscribe", () => {
    const lanes = new Map<string, unknown>([
      ["a", {}],
      ["b", {}],
    ]);
    const room = new LaneRoom(lanes, 3);
    // A subscribe to a's lane, which the host serves (no new room), and one to c (the last room).
    const toA = room.take("a");
    const c = room.take("c");
    // a's channel let the lane go meanwhile: the subscribe on its way will open it again.
    lanes.delete("a");
    room.closed("a");
    expect(room.used).toBe(3);
    expect(room.take("d")).toBeNull();
    lanes.set("a", {});
    room.opened("a");
    toA?.();
    c?.();
    expect(room.used).toBe(2);
  });

  it("counts only lanes as load, rounded down: subscribes on their way and a few empty lanes keep no host full or placed", () => {
    const lanes = new Map<string, unknown>();
    const room = new LaneRoom(lanes, 10_000);
    room.take("on-its-way");
    expect(room.load(1000)).toBe(0);
    for (let i = 0; i < 9; i++) lanes.set(`c${i}`, {});
    expect(room.load(1000)).toBe(0);
  });

  it("counts the lanes as the same share of a host's connections as they take of its most", () => {
    const lanes = new Map<string, unknown>();
    const room = new LaneRoom(lanes, 10_000);
    expect(room.load(1000)).toBe(0);
    for (let i = 0; i < 5_009; i++) lanes.set(`c${i}`, {});
    expect(room.load(1000)).toBe(500);
    for (let i = 5_009; i < 10_000; i++) lanes.set(`c${i}`, {});
    expect(room.load(1000)).toBe(1000);
  });
});
