/**
 * Both doors on one channel (docs/api.md, "Both doors, one channel"), and one channel's Pusher
 * audience spread over connection hosts like relays (docs/operations.md, "The Pusher door: how it
 * scales"), in workerd.
 */
import { runDurableObjectAlarm, runInDurableObject } from "cloudflare:test";
import { afterEach, describe, expect, it } from "vitest";
import { channelStub } from "../../src/platform/stubs";
import { makeSummaryDue, openSummaryDrops } from "../support/channel-internals";
import {
  adminHeaders,
  call,
  env,
  envWith,
  historyOf,
  mint,
  openSocket,
  publishTo,
  setRate,
  uniq,
  until,
} from "../support/helpers";
import { APP, closePushers, dataOf, openPusher, type PusherSocket, signedApiCall } from "../support/pusher";

async function token(): Promise<string> {
  return (await mint({ sub: uniq("p"), channels: ["pusher:**"], scopes: ["publish", "subscribe"], rl: "1000/s" }))
    .access_token;
}

async function statsOf(channel: string): Promise<{ websockets: number; relays: number; relay_sends_total: number }> {
  return (await (await call(`/v1/channels/${channel}/stats`, { headers: adminHeaders() })).json()) as {
    websockets: number;
    relays: number;
    relay_sends_total: number;
  };
}

afterEach(async () => {
  await env.THROTTLE_KV.delete("throttleRate");
});

afterEach(closePushers);
describe("both doors, one channel", () => {
  it("a native subscriber and a Pusher one get the same events; history and seq hold", async () => {
    const name = uniq("both-");
    const channel = `pusher:${name}`;
    const native = await openSocket(channel);
    const p = await openPusher();
    await p.subscribe(name);
    const t = await token();
    expect((await publishTo(channel, t, { event: "from-native", data: "1" })).status).toBe(200);
    await signedApiCall("POST", `/apps/${APP.id}/events`, {}, { name: "from-api", data: '{"n":2}', channels: [name] });
    const frames = await native.next(2);
    expect(frames.map((f) => [f.seq, f.data])).toEqual([
      [1, { event: "from-native", data: "1" }],
      [2, { event: "from-api", data: '{"n":2}' }],
    ]);
    await p.next((e) => e.event === "from-api");
    expect(p.events.filter((e) => e.channel === name).map((e) => [e.event, e.data])).toEqual([
      ["pusher_internal:subscription_succeeded", "{}"],
      ["from-native", "1"],
      ["from-api", '{"n":2}'],
    ]);
    expect((await historyOf(channel, t)).map((m) => m.seq)).toEqual([1, 2]);
    expect(await statsOf(channel)).toMatchObject({ websockets: 2, relays: 2 });
    const presence = await call(`/v1/presence/${channel}`, { headers: { "cf-connecting-ip": "10.9.9.9" } });
    expect(((await presence.json()) as { occupancy: number }).occupancy).toBe(2);
    native.ws.close();
    p.ws.close();
  });

  it("a native publish to a pusher: channel must be {event, data(string)}", async () => {
    const t = await token();
    const channel = `pusher:${uniq()}`;
    for (const body of [{ data: "x" }, { event: "e", data: { x: 1 } }, { event: "e", data: "x", extra: 1 }, "text"]) {
      const res = await publishTo(channel, t, body);
      expect(res.status, JSON.stringify(body)).toBe(400);
    }
    expect(await historyOf(channel, t)).toEqual([]);
  });

  it("summaries of drops reach Pusher subscribers as floodgate:summary, grouped through /data/", async () => {
    const name = `summary.${uniq()}`;
    const channel = `pusher:${name}`;
    const p = await openPusher();
    await p.subscribe(name);
    const t = await token();
    await setRate(channel, 1);
    for (const emoji of ["🔥", "🔥", "👏"]) {
      expect((await publishTo(channel, t, { event: "react", data: JSON.stringify({ emoji }) })).status).toBe(202);
    }
    // Through the HTTP API too: its drop counts under the key its data gives.
    const api = { name: "react", data: JSON.stringify({ emoji: "👏" }), channels: [name] };
    expect((await signedApiCall("POST", `/apps/${APP.id}/events`, {}, api)).status).toBe(200);
    const stub = channelStub(env, channel);
    await until(
      async () => (await runInDurableObject(stub, (instance) => openSummaryDrops(instance))) === 4,
      "four drops in the open summary interval",
    );
    await runInDurableObject(stub, (instance) => makeSummaryDue(instance));
    await runDurableObjectAlarm(stub);
    const summary = await p.next((e) => e.event === "floodgate:summary");
    expect(summary.channel).toBe(name);
    expect(dataOf(summary)).toMatchObject({ type: "summary", channel, dropped: 4 });
    expect((dataOf(summary) as { by_key: unknown }).by_key).toEqual({ "🔥": 2, "👏": 2 });
    p.ws.close();
  });
});

describe("one channel's Pusher audience over hosts", () => {
  it("connections spread over hosts (RELAY_CAPACITY each); a message leaves the channel once per host", async () => {
    const small = envWith({ RELAY_CAPACITY: "2" });
    const name = uniq("spread-");
    const channel = `pusher:${name}`;
    const sockets: PusherSocket[] = [];
    for (let i = 0; i < 5; i++) {
      const p = await openPusher(undefined, small);
      await p.subscribe(name);
      sockets.push(p);
    }
    const stats = await statsOf(channel);
    expect(stats).toMatchObject({ websockets: 5, relays: 3 });
    const t = await token();
    // A first publish stores the calls the subscribes made (counted with a publish's counters).
    await publishTo(channel, t, { event: "warm", data: "" });
    for (const p of sockets) await until(() => p.events.some((e) => e.event === "warm"), "the first event");
    const before = (await statsOf(channel)).relay_sends_total;
    for (let i = 0; i < 4; i++) await publishTo(channel, t, { event: "n", data: String(i) });
    for (const p of sockets) {
      await until(() => p.events.filter((e) => e.event === "n").length === 4, "four events on every connection");
      expect(p.events.filter((e) => e.event === "n").map((e) => e.data)).toEqual(["0", "1", "2", "3"]);
    }
    // Stats count the calls made so far, stored or not: 4 publishes, one call per host each.
    const sends = (await statsOf(channel)).relay_sends_total - before;
    // Sends per publish equal the hosts (3), not the connections (5).
    expect(sends).toBeLessThanOrEqual(3 * 4);
    expect(sends).toBeGreaterThanOrEqual(4);
    for (const p of sockets) p.ws.close();
  });
});
