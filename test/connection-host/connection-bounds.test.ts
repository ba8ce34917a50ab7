/**
 * What one Pusher connection may hold and how long it may stay silent (docs/api.md, "The Pusher
 * door"): 100 channels at once (the 101st is a 429 subscription_error that changes nothing), the
 * activity timeout (a server ping after PUSHER_ACTIVITY_TIMEOUT, close 4201 without an answer within
 * 30 s; a pong keeps it open), and unsubscribing from what it does not hold changes nothing.
 */
import { afterEach, describe, expect, it } from "vitest";
import { adminHeaders, call, uniq, until } from "../support/helpers";
import { hostsWithConnections, livenessAt } from "../support/host-internals";
import { authFor, closePushers, openPusher } from "../support/pusher";

afterEach(closePushers);

describe("a connection's bounds", () => {
  it("holds at most 100 channels: the 101st is subscription_error 429 and subscribes nothing", {
    timeout: 60_000,
  }, async () => {
    const p = await openPusher();
    // Private channels the app signed: they take nothing from the client IP's read budget (40), which
    // 100 public ones would meet first (./read-budget.test.ts).
    const tag = `private-${uniq("many")}`;
    const subscribe = async (name: string) => await p.subscribe(name, await authFor(p, name));
    for (let i = 0; i < 100; i++) {
      expect((await subscribe(`${tag}-${i}`)).event, `channel ${i}`).toBe("pusher_internal:subscription_succeeded");
    }
    const refused = await subscribe(`${tag}-100`);
    expect(refused).toMatchObject({
      event: "pusher:subscription_error",
      data: { status: 429, error: "a connection holds at most 100 channels" },
    });
    const stats = (await (await call(`/v1/channels/pusher:${tag}-100/stats`, { headers: adminHeaders() })).json()) as {
      websockets: number;
    };
    expect(stats.websockets).toBe(0);
    // One unsubscribe frees a place.
    p.send({ event: "pusher:unsubscribe", data: { channel: `${tag}-0` } });
    expect((await subscribe(`${tag}-100`)).event).toBe("pusher_internal:subscription_succeeded");
  });

  it("unsubscribing from a channel it does not hold changes nothing", async () => {
    const p = await openPusher();
    const name = uniq("kept-");
    await p.subscribe(name);
    p.send({ event: "pusher:unsubscribe", data: { channel: uniq("never-") } });
    await p.barrier();
    const stats = (await (await call(`/v1/channels/pusher:${name}/stats`, { headers: adminHeaders() })).json()) as {
      websockets: number;
    };
    expect(stats.websockets).toBe(1);
    expect(p.events.filter((e) => e.event === "pusher:error")).toEqual([]);
  });

  it("after PUSHER_ACTIVITY_TIMEOUT of silence the server pings; no answer within 30 s closes with 4201", async () => {
    const p = await openPusher();
    await p.subscribe(uniq("quiet-"));
    // The host's count reaches its directory with its next report.
    await until(async () => (await hostsWithConnections()).length > 0, "the connection's host in its directory");
    const [host] = await hostsWithConnections();
    const start = Date.now();
    // Not yet silent for 120 s: nothing.
    await livenessAt(host as string, start + 60_000);
    await p.barrier();
    expect(p.events.filter((e) => e.event === "pusher:ping")).toEqual([]);
    await livenessAt(host as string, start + 121_000);
    await p.next((e) => e.event === "pusher:ping");
    await livenessAt(host as string, start + 121_000 + 31_000);
    expect(await p.closed).toMatchObject({ code: 4201 });
  });

  it("a connection that answers the server's ping with pusher:pong stays open and is pinged again after the next silence", async () => {
    const p = await openPusher();
    await p.subscribe(uniq("answers-"));
    await until(async () => (await hostsWithConnections()).length > 0, "the connection's host in its directory");
    const [host] = await hostsWithConnections();
    const start = Date.now();
    await livenessAt(host as string, start + 121_000);
    await p.next((e) => e.event === "pusher:ping");
    const afterFirstPing = p.events.length;
    p.send({ event: "pusher:pong", data: {} });
    await p.barrier();
    // Past the 30 s wait: an answered ping closes nothing; silent again for a timeout, it is pinged again.
    await livenessAt(host as string, start + 121_000 + 31_000);
    await p.next((e) => e.event === "pusher:ping", afterFirstPing);
    await p.barrier();
    expect(p.ws.readyState).toBe(WebSocket.OPEN);
  });
});
