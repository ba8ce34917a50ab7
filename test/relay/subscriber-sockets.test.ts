/**
 * Subscriber sockets, held by the channel's relay (src/relay/relay.ts): hibernation (after the channel and
 * the relay are evicted the sockets still receive and seq continues), a socket whose send fails, and
 * the close and error handlers.
 */

import { evictDurableObject, runInDurableObject } from "cloudflare:test";
import { env } from "cloudflare:workers";
import { describe, expect, it } from "vitest";
import { relayName } from "../../src/relay/placement";
import type { SocketAttachment } from "../../src/relay/subscribers";
import { closeAndWaitTold } from "../support/closes-told";
import { mint, openSocket, publishTo, uniq, withFailing } from "../support/helpers";

/** Polls (no fixed sleep) until the channel's stats match: relays report their counts after a change. */
async function statsUntil(ch: string, ready: (s: Record<string, unknown>) => boolean) {
  for (let i = 0; i < 1000; i++) {
    const stats = (await runInDurableObject(channelStubFor(ch), (instance) => instance.stats())) as unknown as Record<
      string,
      unknown
    >;
    if (ready(stats) || i === 999) return stats;
    await new Promise((r) => setTimeout(r, 5));
  }
  throw new Error("unreachable");
}

/** Resolves with the close event's code once the client side of `ws` sees the socket close. */
function closed(ws: WebSocket): Promise<{ code: number; reason: string }> {
  return new Promise((resolve) => {
    ws.addEventListener("close", (ev) => resolve({ code: ev.code, reason: ev.reason }));
  });
}

function channelStubFor(ch: string) {
  return env.CHANNEL.get(env.CHANNEL.idFromName(ch));
}

/** The channel's only relay (fewer subscribers than RELAY_CAPACITY; no colo locally). */
function relayStubFor(ch: string) {
  return env.RELAY.get(env.RELAY.idFromName(relayName(ch, "local", 0)));
}

/** The relay's server side of the channel's only subscriber so far. */
async function onlyServerSocket(ch: string): Promise<WebSocket> {
  const sockets = await runInDurableObject(relayStubFor(ch), (_instance, state) => state.getWebSockets());
  expect(sockets).toHaveLength(1);
  return sockets[0] as WebSocket;
}

describe("eviction", () => {
  it("hibernated WebSockets keep receiving after eviction, without a gap in seq", async () => {
    const ch = `public:evict.${uniq()}`;
    const t = (await mint({ sub: uniq(), channels: ["public:evict.*"] })).access_token;
    const sub = await openSocket(ch);
    await publishTo(ch, t, "before");
    await sub.next(1);
    const stub = channelStubFor(ch);
    await evictDurableObject(stub);
    await evictDurableObject(relayStubFor(ch));
    await publishTo(ch, t, "after");
    const frames = await sub.next(2);
    expect(frames.map((f) => [f.seq, f.data])).toEqual([
      [1, "before"],
      [2, "after"],
    ]);
    // The counters came back from storage, not from memory.
    const stats = await runInDurableObject(stub, (instance) => instance.stats());
    expect(stats).toMatchObject({ delivered_total: 2, last_seq: 2, websockets: 1, relays: 1 });
    expect(await runInDurableObject(relayStubFor(ch), (relay) => relay.counts())).toEqual({
      websockets: 1,
      sse: 0,
      last_seq: 2,
    });
    await closeAndWaitTold(ch, () => sub.ws.close());
  });

  it("after a wake the latest kept seq wins over a higher one written earlier: nothing is skipped", async () => {
    const ch = `public:evict.${uniq()}`;
    const t = (await mint({ sub: uniq(), channels: ["public:evict.*"] })).access_token;
    const a = await openSocket(ch);
    const b = await openSocket(ch);
    for (let i = 1; i <= 3; i++) await publishTo(ch, t, i);
    await a.next(3);
    await b.next(3);
    // One socket holds the relay's seq (3). The other is given seq 9 from an earlier write, as one
    // left from before the channel started its numbering again would hold it.
    await runInDurableObject(relayStubFor(ch), (_relay, state) => {
      const sockets = state.getWebSockets();
      const kept = sockets.map((ws) => (ws.deserializeAttachment() as SocketAttachment).lastSent);
      const anchor = kept.findIndex((k) => k !== undefined);
      expect(kept[anchor]?.[0]).toBe(3);
      const other = sockets[1 - anchor] as WebSocket;
      const earlier = (kept[anchor]?.[1] ?? 0) - 1;
      other.serializeAttachment({ ...(other.deserializeAttachment() as SocketAttachment), lastSent: [9, earlier] });
    });
    await evictDurableObject(relayStubFor(ch));
    await publishTo(ch, t, 4);
    for (const sub of [a, b]) expect((await sub.next(4)).map((f) => [f.seq, f.data])[3]).toEqual([4, 4]);
    await closeAndWaitTold(ch, () => {
      a.ws.close();
      b.ws.close();
    });
  });

  it("after a wake the socket found holding the seq keeps it: another closing rewrites nothing; it closing hands it on", async () => {
    const ch = `public:evict.${uniq()}`;
    const t = (await mint({ sub: uniq(), channels: ["public:evict.*"] })).access_token;
    const subs = [await openSocket(ch), await openSocket(ch), await openSocket(ch)];
    for (let i = 1; i <= 3; i++) await publishTo(ch, t, i);
    for (const sub of subs) await sub.next(3);
    const lastSent = (ws: WebSocket) => (ws.deserializeAttachment() as SocketAttachment).lastSent;
    await evictDurableObject(relayStubFor(ch));
    // Woken by this call: one socket's attachment holds the seq, and the relay knows it is that one.
    const found = await runInDurableObject(relayStubFor(ch), (relay, state) => {
      const sockets = state.getWebSockets();
      const anchor = sockets.find((ws) => lastSent(ws) !== undefined) as WebSocket;
      const before = sockets.map(lastSent);
      relay.webSocketClose(sockets.find((ws) => ws !== anchor) as WebSocket, 1000, "", true);
      return { held: lastSent(anchor), before, after: sockets.map(lastSent) };
    });
    expect(found.held?.[0]).toBe(3);
    // No socket's attachment was written: not the anchor's again, not another's.
    expect(found.after).toEqual(found.before);
    const handed = await runInDurableObject(relayStubFor(ch), (relay, state) => {
      const anchor = state.getWebSockets().find((ws) => lastSent(ws)?.[1] === found.held?.[1]) as WebSocket;
      relay.webSocketClose(anchor, 1000, "", true);
      const open = state.getWebSockets().filter((ws) => ws.readyState === WebSocket.OPEN);
      return open.map(lastSent);
    });
    expect(handed).toHaveLength(1);
    expect(handed[0]?.[0]).toBe(3);
    expect(handed[0]?.[1]).toBeGreaterThan(found.held?.[1] ?? 0);
    await closeAndWaitTold(ch, () => {
      for (const sub of subs) sub.ws.close();
    });
  });
});

describe("subscriber sockets", () => {
  it("a socket whose send fails is closed with 1011 and the others still get every frame", async () => {
    const ch = `public:evict.${uniq()}`;
    const t = (await mint({ sub: uniq(), channels: ["public:evict.*"] })).access_token;
    const a = await openSocket(ch);
    const failing = await onlyServerSocket(ch);
    const b = await openSocket(ch);
    const aClosed = closed(a.ws);
    // Sends to the first subscriber's server side throw while the publishes run; the rest are real.
    await withFailing(
      WebSocket,
      "send",
      "send failed: peer reset",
      async () => {
        expect((await publishTo(ch, t, 1)).status).toBe(200);
        expect((await publishTo(ch, t, 2)).status).toBe(200);
      },
      (socket) => socket === (failing as unknown as Record<string, unknown>),
    );
    expect((await b.next(2)).map((f) => f.data)).toEqual([1, 2]);
    expect(await aClosed).toMatchObject({ code: 1011 });
    expect(a.frames).toEqual([]);
    const stats = await statsUntil(ch, (s) => s.websockets === 1);
    expect(stats).toMatchObject({ websockets: 1, delivered_total: 2 });
    await closeAndWaitTold(ch, () => b.ws.close());
  });

  it("a subscriber's close is answered with its own code, and the socket stops counting", async () => {
    const ch = `public:evict.${uniq()}`;
    const sub = await openSocket(ch);
    const done = closed(sub.ws);
    await closeAndWaitTold(ch, () => sub.ws.close(4321, "bye"));
    expect((await done).code).toBe(4321);
    const stats = await statsUntil(ch, (s) => s.occupancy === 0);
    expect(stats).toMatchObject({ websockets: 0, occupancy: 0, relays: 0 });
  });

  it("a close without a code (1005) or an abnormal one (1006) is answered with a normal 1000", async () => {
    const ch = `public:evict.${uniq()}`;
    const sub = await openSocket(ch);
    const done = closed(sub.ws);
    const server = await onlyServerSocket(ch);
    await closeAndWaitTold(ch, () =>
      runInDurableObject(relayStubFor(ch), (instance) => {
        instance.webSocketClose(server, 1006, "", false);
      }),
    );
    expect((await done).code).toBe(1000);
  });

  it("a socket error closes that socket with 1011 and leaves the others open", async () => {
    const ch = `public:evict.${uniq()}`;
    const t = (await mint({ sub: uniq(), channels: ["public:evict.*"] })).access_token;
    const a = await openSocket(ch);
    const broken = await onlyServerSocket(ch);
    const b = await openSocket(ch);
    const aClosed = closed(a.ws);
    await runInDurableObject(relayStubFor(ch), (instance) => {
      instance.webSocketError(broken, new Error("stream reset"));
    });
    expect((await aClosed).code).toBe(1011);
    expect((await publishTo(ch, t, "still here")).status).toBe(200);
    expect((await b.next(1)).map((f) => f.data)).toEqual(["still here"]);
    await closeAndWaitTold(ch, () => b.ws.close());
  });
});
