/**
 * Relays (docs/api.md, "Relays"): a channel's subscribers spread over relay objects with
 * RELAY_CAPACITY 10 (a Worker with that configuration; the channel and relays take the capacities the
 * Worker passes), real sockets in workerd. Every subscriber gets every message once, in order, across
 * relays, a relay's eviction, failed calls and a resume on another relay; a slow relay or subscriber
 * holds up nobody else. How relays are counted and let go: test/relay/relay-counts.test.ts.
 */

import { createExecutionContext, evictDurableObject, runInDurableObject } from "cloudflare:test";
import { describe, expect, it } from "vitest";
import { ChannelObject } from "../../src/channel/channel-object";
import worker from "../../src/index";
import { Relay } from "../../src/relay/relay";
import {
  BASE,
  freshIp,
  openSocket,
  publisher,
  publishTo,
  SLOW_TEST_MS,
  uniq,
  until,
  withFailing,
} from "../support/helpers";
import { relayClock } from "../support/reader-fixtures";
import {
  CAPACITY,
  channelStub,
  closed,
  openSockets,
  openSse,
  range,
  relayEnv,
  relayStub,
  seqs,
  settled,
  stats,
} from "../support/relay-fixtures";

describe("fan-out over relays", () => {
  it("120 subscribers (WebSocket and SSE) over 12 relays each get every message once, in seq order", {
    timeout: SLOW_TEST_MS,
  }, async () => {
    const ch = `public:relays.${uniq()}`;
    const t = await publisher("public:relays.*");
    const sockets: Awaited<ReturnType<typeof openSocket>>[] = [];
    const streams: Awaited<ReturnType<typeof openSse>>[] = [];
    for (let i = 0; i < 120; i++) {
      if (i % 3 === 2) streams.push(await openSse(ch));
      else sockets.push(await openSocket(ch, "", relayEnv));
    }
    const before = await stats(ch);
    expect(before).toMatchObject({ occupancy: 120, websockets: 80, sse: 40, relays: 12 });
    // Publishes in flight together: batches coalesce on each relay's line, order must hold anyway.
    const N = 30;
    for (let i = 0; i < N; i += 5) {
      const answers = await Promise.all(range(i, i + 4).map((k) => publishTo(ch, t, { k })));
      for (const a of answers) expect(a.status).toBe(200);
    }
    for (const s of sockets) await s.next(N);
    await until(() => streams.every((s) => s.frames.length >= N), "every SSE frame");
    for (const frames of [...sockets.map((s) => s.frames), ...streams.map((s) => s.frames)]) {
      expect(seqs(frames)).toEqual(range(1, N));
    }
    // One call per relay per batch at most: sends grow with relays, never with subscribers.
    const after = await stats(ch);
    expect(after.relay_sends_total - before.relay_sends_total).toBeGreaterThanOrEqual(12);
    expect(after.relay_sends_total - before.relay_sends_total).toBeLessThanOrEqual(12 * N);
    for (const s of sockets) s.ws.close();
    for (const s of streams) await s.close();
    await settled(ch);
  });

  it("concurrent subscribes never overfill a relay: each slot is reserved when it is given", async () => {
    const ch = `public:relays.${uniq()}`;
    const subs = await Promise.all(Array.from({ length: 25 }, () => openSocket(ch, "", relayEnv)));
    expect(await stats(ch)).toMatchObject({ occupancy: 25, relays: 3 });
    const counts = await Promise.all([0, 1, 2].map((k) => runInDurableObject(relayStub(ch, k), (r) => r.counts())));
    expect(counts.map((c) => c.websockets)).toEqual([10, 10, 5]);
    for (const s of subs) s.ws.close();
    await settled(ch);
  });

  it("with fewer subscribers than RELAY_CAPACITY there is one relay", async () => {
    const ch = `public:relays.${uniq()}`;
    const subs = await openSockets(ch, CAPACITY);
    expect(await stats(ch)).toMatchObject({ occupancy: CAPACITY, relays: 1 });
    const one = await openSocket(ch, "", relayEnv);
    expect(await stats(ch)).toMatchObject({ occupancy: CAPACITY + 1, relays: 2 });
    for (const s of [...subs, one]) s.ws.close();
    await settled(ch);
  });
});

describe("order and repair", () => {
  it("a relay evicted mid-stream continues without a gap: its WebSockets and last seq survive", async () => {
    const ch = `public:relays.${uniq()}`;
    const t = await publisher("public:relays.*");
    const subs = await openSockets(ch, 15);
    for (let i = 1; i <= 3; i++) expect((await publishTo(ch, t, i)).status).toBe(200);
    for (const s of subs) await s.next(3);
    await evictDurableObject(relayStub(ch, 0));
    for (let i = 4; i <= 6; i++) expect((await publishTo(ch, t, i)).status).toBe(200);
    for (const s of subs) expect(seqs(await s.next(6))).toEqual(range(1, 6));
    expect(await runInDurableObject(relayStub(ch, 0), (r) => r.counts())).toMatchObject({
      websockets: 10,
      last_seq: 6,
    });
    for (const s of subs) s.ws.close();
    await settled(ch);
  });

  it("the last seq moves to another socket when the one holding it closes: evicted then, the relay repeats nothing", async () => {
    const ch = `public:relays.${uniq()}`;
    const t = await publisher("public:relays.*");
    const subs = await openSockets(ch, CAPACITY); // all on relay 0
    for (let i = 1; i <= 3; i++) expect((await publishTo(ch, t, i)).status).toBe(200);
    for (const s of subs) await s.next(3);
    // Its count reports fail from here, so its stored row is not rewritten either: after the closes
    // only the one socket left can hold where the stream stood.
    // The one left is from the middle: whichever end the runtime lists first, the socket holding the
    // seq is among those closed.
    const [kept] = subs.splice(4, 1);
    await withFailing(ChannelObject, "relayReport", "channel unavailable", async () => {
      for (const s of subs) s.ws.close();
      await until(
        async () => (await runInDurableObject(relayStub(ch, 0), (r: Relay) => r.counts())).websockets === 1,
        "the relay to see nine sockets close",
      );
      await evictDurableObject(relayStub(ch, 0));
    });
    for (let i = 4; i <= 6; i++) expect((await publishTo(ch, t, i)).status).toBe(200);
    if (!kept) throw new Error("no socket left");
    expect(seqs(await kept.next(6))).toEqual(range(1, 6));
    kept.ws.close();
    await settled(ch);
  });

  it("a relay reset by an abort drops its sockets, and its subscribers resume elsewhere with no gap or repeat", async () => {
    const ch = `public:relays.${uniq()}`;
    const t = await publisher("public:relays.*");
    const subs = await openSockets(ch, 15);
    for (let i = 1; i <= 3; i++) expect((await publishTo(ch, t, i)).status).toBe(200);
    for (const s of subs) await s.next(3);
    // The object is thrown away mid-stream: the runtime disconnects its WebSockets (unlike an
    // eviction, which they survive hibernated).
    await expect(
      runInDurableObject(relayStub(ch, 0), (_r, state) => {
        state.abort("reset for the test");
      }),
    ).rejects.toThrow();
    const [dropped, kept] = [subs.slice(0, CAPACITY), subs.slice(CAPACITY)];
    await until(() => dropped.every((s) => s.ws.readyState !== WebSocket.OPEN), "the reset relay's sockets to drop");
    for (let i = 4; i <= 6; i++) expect((await publishTo(ch, t, i)).status).toBe(200);
    for (const s of kept) expect(seqs(await s.next(6))).toEqual(range(1, 6));
    // Each resumes after the last seq it got, on whichever relay it is given.
    for (const s of dropped) {
      const back = await openSocket(ch, `?after=${s.frames.at(-1)?.seq}`, relayEnv);
      expect(seqs([...s.frames, ...(await back.next(3))])).toEqual(range(1, 6));
      back.ws.close();
    }
    for (const s of kept) s.ws.close();
    await settled(ch);
  });

  it("calls to a relay that failed are repaired from history before anything newer, even if the channel goes quiet", async () => {
    const ch = `public:relays.${uniq()}`;
    const t = await publisher("public:relays.*");
    const subs = await openSockets(ch, 15);
    expect((await publishTo(ch, t, 1)).status).toBe(200);
    for (const s of subs) await s.next(1);
    // Relay 0 fails every call while 2..4 are published (the relay aborted mid-stream); relay 1 gets them.
    await withFailing(
      Relay,
      "deliver",
      "relay aborted",
      async () => {
        for (let i = 2; i <= 4; i++) expect((await publishTo(ch, t, i)).status).toBe(200);
        for (const s of subs.slice(CAPACITY)) await s.next(4);
      },
      (relay) => (relay.identity as { k: number } | null)?.k === 0,
    );
    // No publish follows: the channel's line retries with the head, and the relay fetches the hole.
    for (const s of subs) expect(seqs(await s.next(4))).toEqual(range(1, 4));
    expect((await publishTo(ch, t, 5)).status).toBe(200);
    for (const s of subs) expect(seqs(await s.next(5))).toEqual(range(1, 5));
    for (const s of subs) s.ws.close();
    await settled(ch);
  });

  it("a join whose report answer is overtaken by a delivery sends nothing twice to those already on the relay", async () => {
    const ch = `public:relays.${uniq()}`;
    const t = await publisher("public:relays.*");
    const first = await openSocket(ch, "", relayEnv);
    for (let i = 1; i <= 3; i++) expect((await publishTo(ch, t, i)).status).toBe(200);
    expect(seqs(await first.next(3))).toEqual(range(1, 3));
    // The channel answers the join's report (head 3), but the answer reaches the relay only after
    // the delivery of message 4 has.
    const proto = ChannelObject.prototype as unknown as Record<string, (...a: unknown[]) => unknown>;
    const original = proto.relayReport as (...a: unknown[]) => unknown;
    let release = () => {};
    const gate = new Promise<void>((r) => {
      release = r;
    });
    let held = false;
    proto.relayReport = function (this: unknown, ...args: unknown[]) {
      const answer = original.apply(this, args);
      if (held || (args[1] as { joined: string[] }).joined.length === 0) return answer;
      held = true;
      return gate.then(() => answer);
    };
    let second: Awaited<ReturnType<typeof openSocket>>;
    try {
      const joining = openSocket(ch, "", relayEnv);
      await until(() => held, "the join's report to be answered");
      expect((await publishTo(ch, t, 4)).status).toBe(200);
      expect(seqs(await first.next(4))).toEqual(range(1, 4));
      release();
      second = await joining;
    } finally {
      release();
      proto.relayReport = original;
    }
    expect((await publishTo(ch, t, 5)).status).toBe(200);
    expect(seqs(await first.next(5))).toEqual(range(1, 5));
    expect(seqs(await second.next(2))).toEqual([4, 5]);
    // Nothing more arrives: a repeat would show up as a sixth frame.
    expect((await publishTo(ch, t, 6)).status).toBe(200);
    expect(seqs(await first.next(6))).toEqual(range(1, 6));
    first.ws.close();
    second.ws.close();
    await settled(ch, 1);
  });

  it("a relay whose hole history no longer holds closes its subscribers with 4009 instead of skipping", async () => {
    const ch = `public:relays.${uniq()}`;
    const t = await publisher("public:relays.*");
    const sub = await openSocket(ch, "", relayEnv);
    const done = closed(sub.ws);
    expect((await publishTo(ch, t, 0)).status).toBe(200);
    await sub.next(1);
    // The relay misses 110 messages: more than HISTORY_LIMIT (100) keeps.
    await withFailing(Relay, "deliver", "relay aborted", async () => {
      for (let i = 1; i <= 110; i++) expect((await publishTo(ch, t, i)).status).toBe(200);
    });
    expect((await publishTo(ch, t, 111)).status).toBe(200);
    expect(await done).toMatchObject({ code: 4009 });
    expect(seqs(sub.frames)).toEqual([1]);
    await settled(ch);
  });

  it("a subscriber that resumes on a different relay gets exactly what it missed, then live", async () => {
    const ch = `public:relays.${uniq()}`;
    const t = await publisher("public:relays.*");
    const subs = await openSockets(ch, CAPACITY);
    const leaver = subs[0] as Awaited<ReturnType<typeof openSocket>>;
    for (let i = 1; i <= 3; i++) expect((await publishTo(ch, t, i)).status).toBe(200);
    const seen = await leaver.next(3);
    leaver.ws.close();
    // Its slot on relay 0 is taken by someone else before it comes back.
    await until(async () => (await stats(ch)).occupancy === CAPACITY - 1, "the leave to be counted");
    const taker = await openSocket(ch, "", relayEnv);
    for (let i = 4; i <= 6; i++) expect((await publishTo(ch, t, i)).status).toBe(200);
    const back = await openSse(ch, `?after=${seen.at(-1)?.seq}`);
    expect(await runInDurableObject(relayStub(ch, 1), (r) => r.counts())).toMatchObject({ sse: 1 });
    expect((await publishTo(ch, t, 7)).status).toBe(200);
    await until(() => back.frames.length >= 4, "the resumed frames");
    expect(seqs([...seen, ...back.frames])).toEqual(range(1, 7));
    for (const s of [...subs.slice(1), taker]) s.ws.close();
    await back.close();
    await settled(ch);
  });
});

describe("independence", () => {
  it("a relay that stalls holds up neither the publisher nor the other relays, and then catches up in order", async () => {
    const ch = `public:relays.${uniq()}`;
    const t = await publisher("public:relays.*");
    const subs = await openSockets(ch, 15);
    const proto = Relay.prototype as unknown as Record<string, (...a: unknown[]) => Promise<unknown>>;
    const original = proto.deliver as (...a: unknown[]) => Promise<unknown>;
    let release = () => {};
    const stalled = new Promise<void>((r) => {
      release = r;
    });
    proto.deliver = async function (this: { identity: { k: number } | null }, ...args: unknown[]) {
      if (this.identity?.k === 0) await stalled;
      return original.apply(this, args);
    };
    try {
      for (let i = 1; i <= 5; i++) expect((await publishTo(ch, t, i)).status).toBe(200);
      for (const s of subs.slice(CAPACITY)) expect(seqs(await s.next(5))).toEqual(range(1, 5));
      expect(subs.slice(0, CAPACITY).every((s) => s.frames.length === 0)).toBe(true);
    } finally {
      release();
      proto.deliver = original;
    }
    for (const s of subs) expect(seqs(await s.next(5))).toEqual(range(1, 5));
    for (const s of subs) s.ws.close();
    await settled(ch);
  });

  it("a stalled subscriber on one relay is thinned, then closed, and slows nobody, on its relay or another", async () => {
    const ch = `public:relays.${uniq()}`;
    const res = await worker.fetch(
      new Request(`${BASE}/v1/subscribe/${ch}`, { headers: { upgrade: "websocket", "cf-connecting-ip": freshIp() } }),
      relayEnv,
      createExecutionContext(),
    );
    const stalledWs = res.webSocket;
    if (!stalledWs) throw new Error("no socket");
    // Never accepted: nothing is read, so its relay's sends pile up in its buffer. Its relay (the
    // first) runs on the test's clock, 10 messages a second, so thinning it takes seconds, not sleeps.
    const clock = await relayClock(ch, 0);
    const subs = await openSockets(ch, 14);
    const big = "x".repeat(30_000);
    let n = 0;
    while ((await stats(ch)).occupancy === 15 && n < 400) {
      for (let k = 0; k < 10; k++) {
        n++;
        clock.at += 100;
        await channelStub(ch).publishMany([
          { channel: ch, data: JSON.stringify({ i: n, big }), publisher: "p", action: "deliver", now: Date.now() },
        ]);
      }
      for (const s of subs) await s.next(n);
    }
    for (const s of subs) expect(seqs(await s.next(n))).toEqual(range(1, n));
    expect((await stats(ch)).occupancy).toBe(14);
    const done = closed(stalledWs);
    stalledWs.accept();
    expect(await done).toMatchObject({ code: 4008 });
    for (const s of subs) s.ws.close();
    await settled(ch);
  });
});
