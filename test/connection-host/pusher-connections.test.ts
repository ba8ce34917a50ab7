/**
 * Pusher connections end to end in workerd, with a raw socket where the frames themselves are checked
 * (docs/api.md, "The Pusher door"): the handshake and its refusals, subscribe/unsubscribe, events as
 * published, ping/pong, malformed frames.
 */
import { afterEach, describe, expect, it } from "vitest";
import { ConnectionHost } from "../../src/connection-host/connection-host";
import { HostDirectory } from "../../src/host-directory/host-directory";
import {
  adminHeaders,
  call,
  callAndWait,
  envWith,
  freshIp,
  grown,
  mint,
  publishTo,
  scrapeMetrics,
  uniq,
  until,
} from "../support/helpers";
import { APP, authFor, closePushers, dataOf, openPusher, type PusherEvent } from "../support/pusher";

async function publisher(): Promise<string> {
  return (await mint({ sub: uniq("pub"), channels: ["pusher:**"], scopes: ["publish", "subscribe"] })).access_token;
}

/**
 * A raw connect through a Worker with `customEnv`, as if received at the colo `colo` (its placement
 * group: a group of its own starts with an empty directory). Its frames and its close, refused or not.
 */
async function connectAt(colo: string, customEnv: Env) {
  const headers = { upgrade: "websocket", "cf-connecting-ip": freshIp() };
  const res = await callAndWait(`/app/${APP.key}?protocol=7`, { headers, cf: { colo } } as RequestInit, customEnv);
  const ws = res.webSocket;
  if (res.status !== 101 || !ws) throw new Error(`connect failed: ${res.status}`);
  const frames: PusherEvent[] = [];
  ws.addEventListener("message", (e) => {
    frames.push(JSON.parse(e.data as string) as PusherEvent);
  });
  const closed = new Promise<number>((resolve) => ws.addEventListener("close", (e) => resolve(e.code)));
  ws.accept();
  return { ws, frames, closed };
}

/** A placement group (a colo's code) no other test uses. */
const freshColo = () => `t${crypto.randomUUID().replace(/-/g, "").slice(0, 7)}`;

/** While `run` runs, `cls.prototype[method]` is `replace` (given the real one); then the real one is back. */
async function withReplaced<T>(
  cls: { prototype: object },
  method: string,
  replace: (original: (...args: unknown[]) => unknown) => (...args: unknown[]) => unknown,
  run: () => Promise<T>,
): Promise<T> {
  const proto = cls.prototype as Record<string, unknown>;
  const original = proto[method] as (...args: unknown[]) => unknown;
  proto[method] = replace(original);
  try {
    return await run();
  } finally {
    proto[method] = original;
  }
}

/** The `floodgate_refusals_total` reasons and Pusher error codes that grew between two scrapes. */
function refusalsGrown(before: Record<string, number>, after: Record<string, number>): Record<string, number> {
  return Object.fromEntries(
    Object.entries(grown(before, after)).filter(
      ([k]) => k.startsWith("floodgate_refusals_total") || k.startsWith("floodgate_pusher_errors_total"),
    ),
  );
}

afterEach(closePushers);
describe("the handshake", () => {
  it("answers connection_established with a socket id and the activity timeout", async () => {
    const p = await openPusher();
    expect(p.socketId).toMatch(/^\d+\.\d+$/);
    const first = p.events[0];
    expect(first?.event).toBe("pusher:connection_established");
    expect(JSON.parse(first?.data as string)).toEqual({ socket_id: p.socketId, activity_timeout: 120 });
    const q = await openPusher();
    expect(q.socketId).not.toBe(p.socketId);
    p.ws.close();
    q.ws.close();
  });

  it("a wrong key: pusher:error 4001 then close 4001", async () => {
    const p = await openPusher("/app/nope?protocol=7");
    expect(p.events[0]).toEqual({
      event: "pusher:error",
      data: { code: 4001, message: "App key not in this cluster" },
    });
    expect((await p.closed).code).toBe(4001);
  });

  it("a protocol other than 5 to 7: 4007", async () => {
    const p = await openPusher(`/app/${APP.key}?protocol=4`);
    expect(p.events[0]?.data).toMatchObject({ code: 4007 });
    expect((await p.closed).code).toBe(4007);
  });

  it("without an upgrade: 400 in the API's shape", async () => {
    const res = await call(`/app/${APP.key}?protocol=7`);
    expect(res.status).toBe(400);
  });

  it("a host already full when the connection reaches it: pusher:error 4100, close 4100, counted as host_full", async () => {
    const one = envWith({ RELAY_CAPACITY: "1" });
    const colo = freshColo();
    const before = await scrapeMetrics(one);
    // A directory whose count is behind its hosts' (one place more than they hold): the second
    // connection is placed on the host the first one filled.
    const [first, second] = await withReplaced(
      HostDirectory,
      "place",
      (place) =>
        function (this: unknown, group, capacity) {
          return place.call(this, group, (capacity as number) + 1);
        },
      async () => [await connectAt(colo, one), await connectAt(colo, one)],
    );
    expect(await second.closed).toBe(4100);
    expect(second.frames).toEqual([
      { event: "pusher:error", data: { code: 4100, message: "Over capacity: retry later" } },
    ]);
    expect(refusalsGrown(before, await scrapeMetrics(one))).toEqual({
      'floodgate_refusals_total{reason="host_full"}': 1,
      'floodgate_pusher_errors_total{kind="error",code="4100"}': 1,
    });
    await until(() => first?.frames[0]?.event === "pusher:connection_established", "the first connection taken");
    first?.ws.close();
  });

  it("a host that answers without taking the connection, not full: 4100, counted as unavailable", async () => {
    const before = await scrapeMetrics();
    const refused = await withReplaced(
      ConnectionHost,
      "fetch",
      () => async () => new Response(null, { status: 500 }),
      () => connectAt(freshColo(), envWith({})),
    );
    expect(await refused.closed).toBe(4100);
    expect(refusalsGrown(before, await scrapeMetrics())).toEqual({
      'floodgate_refusals_total{reason="unavailable"}': 1,
      'floodgate_pusher_errors_total{kind="error",code="4100"}': 1,
    });
  });
});

describe("subscribe, events, unsubscribe", () => {
  it("a public channel: subscription_succeeded, then each event once with data exactly as published", async () => {
    const name = uniq("chat-");
    const p = await openPusher();
    const ok = await p.subscribe(name);
    expect(ok).toEqual({ event: "pusher_internal:subscription_succeeded", channel: name, data: "{}" });
    const token = await publisher();
    const data = JSON.stringify({ text: "héllo \u2028", n: 1 });
    const res = await publishTo(`pusher:${name}`, token, { event: "greeting", data });
    expect(res.status).toBe(200);
    const e = await p.next((x) => x.event === "greeting");
    expect(e).toEqual({ event: "greeting", channel: name, data });
    expect(dataOf(e)).toEqual({ text: "héllo \u2028", n: 1 });
    p.send({ event: "pusher:unsubscribe", data: { channel: name } });
    // Unsubscribed: the next event is not sent (a ping's pong proves the host read the unsubscribe first).
    await p.barrier();
    const from = p.events.length;
    await publishTo(`pusher:${name}`, token, { event: "greeting", data: "second" });
    // A second connection still subscribed proves the event was delivered meanwhile.
    const q = await openPusher();
    await q.subscribe(name);
    await publishTo(`pusher:${name}`, token, { event: "greeting", data: "third" });
    await q.next((x) => x.event === "greeting" && x.data === "third");
    expect(p.events.slice(from).filter((x) => x.event === "greeting")).toEqual([]);
    p.ws.close();
    q.ws.close();
  });

  it("one connection holds many channels; each event arrives once on its own channel", async () => {
    const [a, b] = [uniq("a-"), uniq("b-")];
    const p = await openPusher();
    await p.subscribe(a);
    await p.subscribe(b);
    const token = await publisher();
    await publishTo(`pusher:${a}`, token, { event: "e", data: "to a" });
    await publishTo(`pusher:${b}`, token, { event: "e", data: "to b" });
    await p.next((x) => x.channel === a && x.data === "to a");
    await p.next((x) => x.channel === b && x.data === "to b");
    const stats = await (await call(`/v1/channels/pusher:${a}/stats`, { headers: adminHeaders() })).json();
    expect(stats).toMatchObject({ websockets: 1, relays: 1 });
    expect(p.events.filter((x) => x.event === "e")).toHaveLength(2);
    p.ws.close();
  });

  it("ping is answered pong; a malformed or unknown frame gets pusher:error and the connection stays", async () => {
    const p = await openPusher();
    p.ws.send('{"event":"pusher:ping","data":{}}');
    await p.next((x) => x.event === "pusher:pong");
    p.ws.send("not json");
    const err = await p.next((x) => x.event === "pusher:error");
    expect(err.data).toEqual({ code: 4300, message: "frame is not JSON" });
    p.send({ event: "hello", data: {} });
    await p.next(
      (x) => x.event === "pusher:error" && (x.data as { message: string }).message.includes("unknown event"),
    );
    const name = uniq("still-");
    expect((await p.subscribe(name)).event).toBe("pusher_internal:subscription_succeeded");
    p.ws.close();
  });
});

describe("subscriptions refused", () => {
  it("a name Floodgate does not serve (private-encrypted-, invalid) is subscription_error 403 on that channel; the connection stays", async () => {
    const p = await openPusher();
    // Sent raw: these are no Floodgate channels, so the file's cleanup must not wait on them.
    const subscribe = (channel: string, extra = {}) => {
      const from = p.events.length;
      p.send({ event: "pusher:subscribe", data: { channel, ...extra } });
      return p.next((e) => e.channel === channel && e.event.includes("subscription_"), from);
    };
    const encrypted = `private-encrypted-${uniq()}`;
    expect(await subscribe(encrypted, await authFor(p, encrypted))).toEqual({
      event: "pusher:subscription_error",
      channel: encrypted,
      data: { type: "AuthError", error: "private-encrypted- channels are not supported", status: 403 },
    });
    for (const bad of ["has space", "x".repeat(165), "émoji"]) {
      const refused = await subscribe(bad);
      expect(refused, bad).toMatchObject({ event: "pusher:subscription_error", channel: bad, data: { status: 403 } });
    }
    // Refusals of one channel, never of the connection: it still subscribes.
    expect(p.events.filter((e) => e.event === "pusher:error")).toEqual([]);
    expect((await p.subscribe(uniq("after-"))).event).toBe("pusher_internal:subscription_succeeded");
    p.ws.close();
  });

  it("a subscribe naming no channel is a malformed frame: pusher:error 4300, the connection stays", async () => {
    const p = await openPusher();
    for (const data of [{}, { channel: "" }, { channel: 5 }, "not an object"]) {
      const from = p.events.length;
      p.send({ event: "pusher:subscribe", data });
      const err = await p.next((e) => e.event === "pusher:error", from);
      expect(err.data, JSON.stringify(data)).toMatchObject({ code: 4300 });
    }
    expect(p.events.filter((e) => e.event === "pusher:subscription_error")).toEqual([]);
    expect((await p.subscribe(uniq("after-"))).event).toBe("pusher_internal:subscription_succeeded");
    p.ws.close();
  });
});

describe("the dashboard", () => {
  it("counts the door's connections and subscriptions open now", async () => {
    const overview = async () =>
      (
        (await (await call("/v1/admin/overview", { headers: adminHeaders() })).json()) as {
          pusher: { enabled: boolean; connections: number; subscriptions: number };
        }
      ).pusher;
    const before = await overview();
    expect(before.enabled).toBe(true);
    const p = await openPusher();
    await p.subscribe(uniq("dash-"));
    await p.subscribe(uniq("dash-"));
    await until(async () => {
      const now = await overview();
      return now.connections >= before.connections + 1 && now.subscriptions >= before.subscriptions + 2;
    }, "the connection and its two subscriptions counted");
  });
});
