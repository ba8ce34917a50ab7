/**
 * Pusher connections end to end in workerd, with a raw socket where the frames themselves are checked
 * (docs/api.md, "The Pusher door"): the handshake and its refusals, subscribe/unsubscribe, events as
 * published, ping/pong, malformed frames.
 */
import { afterEach, describe, expect, it } from "vitest";
import { adminHeaders, call, mint, publishTo, uniq, until } from "../support/helpers";
import { APP, authFor, closePushers, dataOf, openPusher } from "../support/pusher";

async function publisher(): Promise<string> {
  return (await mint({ sub: uniq("pub"), channels: ["pusher:**"], scopes: ["publish", "subscribe"] })).access_token;
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
