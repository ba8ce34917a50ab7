/**
 * A connection host's lanes keep their last seq through hibernation (src/connection-host/lane-seq.ts):
 * in one subscribed connection's attachment, not in the lane's row with every batch; in the row when
 * no connection has room. Real Pusher connections through the Worker, the host evicted as the runtime
 * evicts an idle one (its sockets hibernate). The channel's count reports fail meanwhile, so the
 * lane's row is not rewritten with them: only where the seq is kept tells the host where each lane
 * stood, and a seq kept nowhere repeats the messages before it (the lane fetches them again). Then
 * the keeper itself (src/connection-host/lane-seq.ts) with real sockets and the writes it asks for
 * recorded: who holds the seq after each event.
 */
import { runInDurableObject } from "cloudflare:test";
import { afterEach, describe, expect, it, vi } from "vitest";
import { ChannelObject } from "../../src/channel/channel-object";
import { ConnectionHost } from "../../src/connection-host/connection-host";
import { type ConnectionAttachment, SEQ_ROOM_BYTES } from "../../src/connection-host/connections";
import { HostStore } from "../../src/connection-host/host-store";
import { HostLane, type LaneSub } from "../../src/connection-host/lane";
import { LaneSeq, type LaneSeqHolders } from "../../src/connection-host/lane-seq";
import { AlarmScheduler } from "../../src/platform/alarm-scheduler";
import { connectionHostStub } from "../../src/platform/stubs";
import type { ChannelForRelay } from "../../src/relay/calls";
import { env, uniq, until, withFailing } from "../support/helpers";
import { attachmentOf, editAttachmentOf, evictHostOf, hostOf } from "../support/host-internals";
import {
  closePushers,
  got,
  numbers,
  openPusher,
  type PusherSocket,
  publishEvent,
  pusherPublisher,
} from "../support/pusher";

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
    const subs: PusherSocket[] = [];
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

  it("a closing connection that anchors lanes: its host sees it CLOSING, hands each seq on, and does not rewrite its attachment", async () => {
    const names = [uniq("closing-a-"), uniq("closing-b-")];
    const keys = names.map((n) => `pusher:${n}`);
    const t = await pusherPublisher();
    const [p, q] = [await openPusher(), await openPusher()];
    // p alone at the first delivery, so it anchors both lanes.
    for (const n of names) await p.subscribe(n);
    for (const n of names) await publishEvent(n, t, 1);
    for (const n of names) await q.subscribe(n);
    for (const n of names) await publishEvent(n, t, 2);
    for (const n of names) {
      await got(p, n, 2);
      await got(q, n, 2);
    }
    const host = await hostOf(q.socketId);
    expect(await hostOf(p.socketId)).toBe(host);
    expect(Object.keys((await attachmentOf(p.socketId))?.seqs ?? {}).sort()).toEqual([...keys].sort());
    // What the host sees of p in its close event: its state on entry, its attachment once handled.
    const seen: { readyState: number; seqs: ConnectionAttachment["seqs"] }[] = [];
    const close = ConnectionHost.prototype.webSocketClose;
    const spy = vi.spyOn(ConnectionHost.prototype, "webSocketClose");
    spy.mockImplementation(function (this: ConnectionHost, ws, ...rest) {
      const readyState = ws.readyState;
      close.call(this, ws, ...rest);
      seen.push({ readyState, seqs: (ws.deserializeAttachment() as ConnectionAttachment).seqs });
    });
    try {
      p.ws.close(1000);
      await until(() => seen.length === 1, "the host's close event for p");
    } finally {
      spy.mockRestore();
    }
    expect(seen[0]?.readyState).toBe(WebSocket.READY_STATE_CLOSING);
    // Each lane's entry left as it was: no write for a socket that goes.
    expect(Object.keys(seen[0]?.seqs ?? {}).sort()).toEqual([...keys].sort());
    // And each seq handed to q in the same event.
    const kept = (await attachmentOf(q.socketId))?.seqs ?? {};
    for (const k of keys) expect(kept[k]?.[0]).toBe(2);
  });

  it("after a wake the latest kept seq wins over a higher one written earlier: nothing is skipped", async () => {
    const name = uniq("latest-");
    const key = `pusher:${name}`;
    const t = await pusherPublisher();
    const subs = [await openPusher(), await openPusher()];
    for (const p of subs) expect((await p.subscribe(name)).event).toBe("pusher_internal:subscription_succeeded");
    await withReportsFailing(async () => {
      for (let i = 1; i <= 3; i++) await publishEvent(name, t, i);
      for (const p of subs) await got(p, name, 3);
      // One connection holds the lane's seq (3). The other is given seq 9 from an earlier write, as one
      // left from before the channel started its numbering again would hold it.
      const kept = await Promise.all(subs.map(async (p) => (await attachmentOf(p.socketId))?.seqs?.[key]));
      const anchor = kept.findIndex((k) => k !== undefined);
      expect(kept[anchor]?.[0]).toBe(3);
      const earlier = (kept[anchor]?.[1] ?? 0) - 1;
      await editAttachmentOf(subs[1 - anchor]?.socketId ?? "", (a) => ({
        ...a,
        seqs: { ...a.seqs, [key]: [9, earlier] },
      }));
      expect(await evictHostOf(subs[0]?.socketId ?? "")).toBe(true);
    });
    await publishEvent(name, t, 4);
    for (const p of subs) {
      await got(p, name, 4);
      expect(numbers(p, name)).toEqual(range(1, 4));
    }
  });

  it("a connection holds the seqs of as many lanes as its room takes; the lanes past it keep theirs in their rows", async () => {
    // Names of 150 characters: a few lanes fill one connection's room.
    const names = Array.from({ length: 8 }, (_, i) => `${uniq(`room${i}-`)}-${"x".repeat(130)}`);
    const t = await pusherPublisher();
    const p = await openPusher();
    for (const name of names) expect((await p.subscribe(name)).event).toBe("pusher_internal:subscription_succeeded");
    let fits = 0;
    await withReportsFailing(async () => {
      for (const name of names) for (let i = 1; i <= 3; i++) await publishEvent(name, t, i);
      for (const name of names) await got(p, name, 3);
      const held = Object.keys((await attachmentOf(p.socketId))?.seqs ?? {});
      fits = Math.floor(SEQ_ROOM_BYTES / (`pusher:${names[0]}`.length + 32));
      expect(held).toHaveLength(fits);
      expect(fits).toBeLessThan(names.length);
      expect(await evictHostOf(p.socketId)).toBe(true);
    });
    for (const name of names) for (let i = 4; i <= 6; i++) await publishEvent(name, t, i);
    for (const name of names) {
      await got(p, name, 6);
      expect(numbers(p, name), name).toEqual(range(1, 6));
    }
    // Full, the attachment is still well inside the runtime's 2 KiB (its other fields are written with it).
    const full = await attachmentOf(p.socketId);
    expect(Object.keys(full?.seqs ?? {})).toHaveLength(fits);
    expect(JSON.stringify(full).length).toBeLessThan(1536);
  });

  it("a host whose tables an older version made reads its lanes at generation 0 and stores generations", async () => {
    const stub = connectionHostStub(env, `host:local:${uniq("old-")}`);
    const lanes = await runInDurableObject(stub, (_h: ConnectionHost, state) => {
      const sql = state.storage.sql;
      // The three tables as the version before lane seqs made them.
      sql.exec(
        "CREATE TABLE host (id INTEGER PRIMARY KEY CHECK (id = 1), name TEXT NOT NULL, grp TEXT NOT NULL, k INTEGER NOT NULL)",
      );
      sql.exec(
        "CREATE TABLE lanes (channel TEXT PRIMARY KEY, last_seq INTEGER NOT NULL, reported INTEGER NOT NULL DEFAULT 0)",
      );
      sql.exec(
        "CREATE TABLE subscriptions (socket TEXT NOT NULL, channel TEXT NOT NULL, floor INTEGER NOT NULL, user_id TEXT, user_info TEXT, PRIMARY KEY (socket, channel))",
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

/** Where a lane's seq is written, as its host would keep it: each socket's entries, and the row's writes. */
class RecordingHolders implements LaneSeqHolders {
  readonly held = new Map<WebSocket, Map<string, [number, number]>>();
  /** Each row write: its seq and generation. */
  readonly rows: [number, number][] = [];
  /** How many lanes each socket has room for (1 unless set). */
  readonly room = new Map<WebSocket, number>();
  private last = 0;

  keepSeq(ws: WebSocket, key: string, seq: number, generation: number): boolean {
    const entries = this.held.get(ws) ?? new Map<string, [number, number]>();
    if (!entries.has(key) && entries.size >= (this.room.get(ws) ?? 1)) return false;
    entries.set(key, [seq, generation]);
    this.held.set(ws, entries);
    return true;
  }
  dropSeq(ws: WebSocket, key: string): void {
    this.held.get(ws)?.delete(key);
  }
  storeRow(seq: number, generation: number): void {
    this.rows.push([seq, generation]);
  }
  nextGeneration(): number {
    return ++this.last;
  }
  /** The seq `ws` holds for `key`, or undefined. */
  seqOn(ws: WebSocket, key: string): number | undefined {
    return this.held.get(ws)?.get(key)?.[0];
  }
}

/** An open server-side WebSocket (its peer accepted too). */
function openSocket(): WebSocket {
  const pair = new WebSocketPair();
  pair[0].accept();
  pair[1].accept();
  return pair[1];
}

describe("where a lane keeps its seq (LaneSeq)", () => {
  const key = "pusher:lane";

  it("the anchor leaving hands the seq to another connection in the same event and takes it off the one that left", () => {
    const holders = new RecordingHolders();
    const seq = new LaneSeq(key, holders);
    const [a, b] = [openSocket(), openSocket()];
    const subs = new Map<WebSocket, unknown>([
      [a, {}],
      [b, {}],
    ]);
    seq.keep(3, subs);
    expect([holders.seqOn(a, key), holders.seqOn(b, key)]).toEqual([3, undefined]);
    seq.keep(3, subs); // unchanged: nothing written
    const generation = seq.generation;
    subs.delete(a);
    seq.left(a, 3, subs);
    expect([holders.seqOn(a, key), holders.seqOn(b, key)]).toEqual([undefined, 3]);
    expect(seq.generation).toBeGreaterThan(generation);
    expect(holders.rows).toEqual([]);
  });

  it("left with no connection, it is held nowhere: the next connection is written the seq even unchanged", () => {
    const holders = new RecordingHolders();
    const seq = new LaneSeq(key, holders);
    const a = openSocket();
    const subs = new Map<WebSocket, unknown>([[a, {}]]);
    seq.keep(3, subs);
    subs.delete(a);
    seq.left(a, 3, subs);
    expect(holders.seqOn(a, key)).toBeUndefined();
    const c = openSocket();
    subs.set(c, {});
    seq.keep(3, subs);
    expect(holders.seqOn(c, key)).toBe(3);
  });

  it("with no room on any connection the row takes each new seq; a connection with room takes it back", () => {
    const holders = new RecordingHolders();
    const seq = new LaneSeq(key, holders);
    const [a, b] = [openSocket(), openSocket()];
    holders.room.set(a, 0);
    holders.room.set(b, 0);
    const subs = new Map<WebSocket, unknown>([
      [a, {}],
      [b, {}],
    ]);
    seq.keep(10, subs);
    seq.keep(10, subs); // unchanged: the row holds it
    seq.keep(20, subs);
    // Each row write carries its seq and the generation its keep stamped: one per write.
    expect(holders.rows).toEqual([
      [10, 1],
      [20, 2],
    ]);
    const c = openSocket();
    subs.set(c, {});
    seq.keep(30, subs);
    expect(holders.seqOn(c, key)).toBe(30);
    expect(holders.rows).toHaveLength(2);
  });

  it("a subscription whose join the channel never heard gives up the seq it took meanwhile", async () => {
    await runInDurableObject(
      connectionHostStub(env, `host:local:${uniq("lane-")}`),
      async (_h: ConnectionHost, state) => {
        const holders = new RecordingHolders();
        let failReport: (e: Error) => void = () => {};
        const channel: ChannelForRelay = {
          relayReport: () =>
            new Promise((_resolve, reject) => {
              failReport = reject;
            }),
          framesAfter: () => ({ frames: [], more: false }),
        };
        const lane: HostLane = new HostLane(key, "lane", {
          identity: () => ({ name: "host:local:0", group: "local", k: 0 }),
          channel: () => channel,
          alarms: new AlarmScheduler(state.storage, "a test lane's alarm"),
          storeLane: (l, kept) => {
            const at = kept?.seq ?? l.lastSeq ?? 0;
            holders.rows.push([at, kept?.generation ?? l.seq.stamp(at)]);
          },
          leaveLane: () => {},
          sent: () => {},
          droppedSide: () => {},
          closeConnection: () => {},
          keepSeq: (ws, k, s, g) => holders.keepSeq(ws, k, s, g),
          dropSeq: (ws, k) => holders.dropSeq(ws, k),
          nextGeneration: () => holders.nextGeneration(),
        });
        const sub = (socketId: string): LaneSub => ({
          socketId,
          client: "ip:10.0.0.1",
          floor: 5,
          userId: null,
          userInfo: null,
          joining: false,
          skipUpTo: 0,
        });
        // A holds no room; B joins, and a batch comes while the channel has not answered its report.
        const [a, b] = [openSocket(), openSocket()];
        holders.room.set(a, 0);
        lane.lastSeq = 5;
        lane.subs.set(a, sub("1.1"));
        const joined = lane.join(b, sub("2.2"), "reservation", 5);
        await lane.inLane(() => lane.apply([], 5));
        expect(holders.seqOn(b, key)).toBe(5);
        failReport(new Error("channel unavailable"));
        expect(await joined).toBe(false);
        expect(holders.seqOn(b, key)).toBeUndefined();
        expect(holders.rows.length).toBeGreaterThan(0);
      },
    );
  });
});
