/**
 * One relay's memory bound (src/relay/memory.ts) on its own: the most-behind subscribers are
 * closed until the rest fit, from the backlogs the sending pass read or, without them, read anew.
 */
import { describe, expect, it } from "vitest";
import { boundMemory, SocketBacklog } from "../../src/relay/memory";
import type { RelaySubscribers } from "../../src/relay/subscribers";

function relayOf(waiting: number[], sse: number[] = []) {
  const sockets = waiting.map(
    (bufferedAmount, i) => ({ bufferedAmount, readyState: 1, name: `ws${i}` }) as unknown as WebSocket,
  );
  const streams = sse.map((bytes, i) => ({ bytes, name: `sse${i}` }));
  const closed: string[] = [];
  let reads = 0;
  const subs = {
    sockets: () => {
      reads++;
      return sockets;
    },
    closeSocket: (ws: { name: string }) => closed.push(ws.name),
    hub: {
      all: streams,
      backlog: (c: { bytes: number }) => c.bytes,
      cut: (c: { name: string }) => closed.push(c.name),
    },
  } as unknown as RelaySubscribers;
  return { subs, sockets, closed, reads: () => reads };
}

describe("a relay's memory bound", () => {
  it("closes the most behind first, WebSocket or SSE, until the rest fit, counting each", () => {
    const relay = relayOf([100, 700, 50], [400]);
    let slow = 0;
    boundMemory(relay.subs, 600, () => slow++);
    expect(relay.closed).toEqual(["ws1"]); // 1,250 → 550
    expect(slow).toBe(1);
    boundMemory(relay.subs, 100, () => slow++);
    expect(relay.closed).toEqual(["ws1", "ws1", "sse0", "ws0"]); // (a fake: closed sockets keep counting)
  });

  it("takes the sending pass's backlogs instead of reading every socket again", () => {
    const relay = relayOf([0, 0, 0]);
    const backlog = new SocketBacklog();
    // What the pass read right after its sends: the second socket is far behind.
    backlog.add(relay.sockets[0] as WebSocket, 10);
    backlog.add(relay.sockets[1] as WebSocket, 900);
    backlog.add(relay.sockets[2] as WebSocket, 0);
    boundMemory(relay.subs, 500, () => {}, backlog);
    expect(relay.reads()).toBe(0);
    expect(relay.closed).toEqual(["ws1"]);
    // Under the bound: nobody closed.
    const under = new SocketBacklog();
    under.add(relay.sockets[0] as WebSocket, 400);
    boundMemory(relay.subs, 500, () => {}, under);
    expect(relay.closed).toEqual(["ws1"]);
  });
});
