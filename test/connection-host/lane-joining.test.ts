/**
 * A connection host's lane while a subscription joins (src/connection-host/lane.ts): side frames that
 * come before the channel answers its report wait for its `subscription_succeeded`, the newest 64 of
 * them; the ones let go are counted for `/metrics`. The messages it is owed from before the lane's
 * last seq are caught up from history; owed more than 1 MiB, the connection is closed as slow (4100,
 * as the host's other slow closes), and a catch-up that fails closes it as an internal failure
 * (4200: reconnect at once). A lane with a plain owner and a channel whose answers the test gives, on
 * a real socket pair.
 */
import { runInDurableObject } from "cloudflare:test";
import { describe, expect, it } from "vitest";
import type { ConnectionHost } from "../../src/connection-host/connection-host";
import { HostLane, type LaneOwner } from "../../src/connection-host/lane";
import { AlarmScheduler } from "../../src/platform/alarm-scheduler";
import { connectionHostStub } from "../../src/platform/stubs";
import type { ChannelForRelay, RelayReportAnswer } from "../../src/relay/calls";
import { env, uniq, until } from "../support/helpers";

/** A lane of channel `key` whose owner does nothing but what `owner` gives, and whose channel is `channel`. */
function laneOf(state: DurableObjectState, key: string, channel: ChannelForRelay, owner: Partial<LaneOwner>): HostLane {
  return new HostLane(key, key.slice("pusher:".length), {
    identity: () => ({ name: "host:local:0", group: "local", k: 0 }),
    channel: () => channel,
    alarms: new AlarmScheduler(state.storage, "a test lane's alarm"),
    storeLane: () => {},
    leaveLane: () => {},
    sent: () => {},
    droppedSide: () => {},
    closeConnection: () => {},
    keepSeq: () => true,
    dropSeq: () => {},
    nextGeneration: () => 1,
    ...owner,
  });
}

describe("a lane's joining subscription", () => {
  it("keeps the newest 64 side frames that came while it joined, and counts the rest let go", async () => {
    await runInDurableObject(
      connectionHostStub(env, `host:local:${uniq("join-")}`),
      async (_h: ConnectionHost, state) => {
        let answer: (a: RelayReportAnswer) => void = () => {};
        const channel: ChannelForRelay = {
          relayReport: () =>
            new Promise((resolve) => {
              answer = resolve;
            }),
          framesAfter: () => ({ frames: [], more: false }),
        };
        let dropped = 0;
        const lane = laneOf(state, "pusher:joining", channel, {
          droppedSide: (n) => {
            dropped += n;
          },
        });
        const pair = new WebSocketPair();
        const received: string[] = [];
        pair[0].accept();
        pair[0].addEventListener("message", (e) => received.push(e.data as string));
        pair[1].accept();
        const sub = {
          socketId: "1.1",
          client: "ip:10.0.0.1",
          floor: 0,
          userId: null,
          userInfo: null,
          joining: false,
          skipUpTo: 0,
        };
        const joined = lane.join(pair[1], sub, "reservation", 0);
        // 70 side frames in two calls while the channel has not answered: 6 more than a joiner keeps.
        const side = (from: number, n: number) =>
          Array.from({ length: n }, (_, i) => ({ event: "pusher" as const, text: `side ${from + i}` }));
        await lane.inLane(() => lane.apply([], 0, side(0, 40)));
        await lane.inLane(() => lane.apply([], 0, side(40, 30)));
        expect(dropped).toBe(6);
        answer({ leave: false, head: 0 });
        expect(await joined).toBe(true);
        await until(() => received.length === 65, "subscription_succeeded and what it was kept");
        expect(JSON.parse(received[0] ?? "{}")).toMatchObject({ event: "pusher_internal:subscription_succeeded" });
        expect(received.slice(1)).toEqual(side(6, 64).map((f) => f.text));
      },
    );
  });

  it("owed more than 1 MiB of history, closes the connection as slow (4100); a catch-up that fails, as internal (4200)", async () => {
    await runInDurableObject(
      connectionHostStub(env, `host:local:${uniq("catch-up-")}`),
      async (_h: ConnectionHost, state) => {
        const closes: { code: number; reason: string; ended: string }[] = [];
        const joinOwing = async (framesAfter: ChannelForRelay["framesAfter"]) => {
          const channel: ChannelForRelay = { relayReport: async () => ({ leave: false, head: 10 }), framesAfter };
          const lane = laneOf(state, `pusher:${uniq("owing-")}`, channel, {
            closeConnection: (_ws, code, reason, ended) => {
              closes.push({ code, reason, ended });
            },
          });
          // The lane has sent up to seq 10; the subscription's slot was reserved at seq 2.
          lane.lastSeq = 10;
          const pair = new WebSocketPair();
          pair[1].accept();
          const sub = {
            socketId: "1.2",
            client: "ip:10.0.0.2",
            floor: 2,
            userId: null,
            userInfo: null,
            joining: false,
            skipUpTo: 0,
          };
          expect(await lane.join(pair[1], sub, "reservation", 2)).toBe(true);
          await lane.inLane(() => undefined);
        };
        await joinOwing(() => ({ frames: [], more: true }));
        expect(closes).toEqual([{ code: 4100, reason: "too far behind on a channel; reconnect", ended: "slow" }]);
        closes.length = 0;
        await joinOwing(() => {
          throw new Error("channel gone");
        });
        expect(closes).toEqual([
          { code: 4200, reason: "could not catch up on a channel; reconnect", ended: "internal" },
        ]);
      },
    );
  });
});
