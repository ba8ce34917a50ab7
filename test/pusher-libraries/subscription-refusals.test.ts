/**
 * A channel's own refusals at the Pusher door (docs/api.md, "The Pusher door"; "Relays"), as
 * pusher-js meets them: past `MAX_SUBSCRIPTIONS_PER_CLIENT` for its client, or 10 × it for the
 * anonymous clients of its IPv6 /48, `pusher:subscription_error` 429; past the channel's
 * `ANONYMOUS_SHARE` of `MAX_SUBSCRIBERS`, or past `MAX_SUBSCRIBERS` itself, 503. Each is counted in
 * `/metrics` (`floodgate_pusher_errors_total{kind="subscription"}`, by status, and
 * `floodgate_refusals_total` by the native door's reason) and changes nothing else. Names and presence members Floodgate does
 * not take (`private-encrypted-`, a signed `channel_data` that is no member) are that channel's
 * subscription_error 403, which pusher-js hands the channel, never a `pusher:error` of the connection.
 *
 * And what an app retrying a refused channel meets (docs/api.md, "Retrying a refused channel takes a
 * new connection"): pusher-js keeps the channel pending, so subscribing it again, or unsubscribing
 * and subscribing it, sends nothing; only a new connection subscribes it again. The docs' advice to
 * apps, reconnect after a back-off on a 429 or 503, rests on this.
 *
 * A Floodgate of its own with small limits (1 subscription per client, so 10 per /48; 30 subscribers,
 * 12 of them anonymous), and in front of it a stand-in for Cloudflare's edge, which gives each
 * connection the client address its path names: the Worker reads a client's address from
 * `CF-Connecting-IP`, which only the edge sets.
 */
import Pusher from "pusher";
import type PusherJS from "pusher-js";
import { afterAll, afterEach, beforeAll, describe, expect, it } from "vitest";
import { edgeInFrontOf, headerInPath } from "./edge";
import { backendAuthorization, client, server, subscribed, uniq, until } from "./floodgate";
import { PUSHER, pusherFloodgate } from "./global-setup";

let worker: { base: string; admin: string; stop(): Promise<void> };
let edge: { port: number; stop(): void };

beforeAll(async () => {
  worker = await pusherFloodgate({
    METRICS_FLUSH_MS: "0",
    MAX_SUBSCRIPTIONS_PER_CLIENT: "1",
    MAX_SUBSCRIBERS: "30",
    ANONYMOUS_SHARE: "0.4",
  });
  // Each connection's client address is the one its path starts with (`/from/<address>/app/…`).
  edge = await edgeInFrontOf(new URL(worker.base), headerInPath("from", "CF-Connecting-IP"));
});
afterAll(async () => {
  edge?.stop();
  await worker?.stop();
});

const clients: PusherJS[] = [];
afterEach(() => {
  for (const c of clients.splice(0)) c.disconnect();
});

/** A pusher-js client connecting from `address`, through the edge. */
function from(address: string, options: Parameters<typeof client>[0] = {}): PusherJS {
  const c = client({
    wsHost: "127.0.0.1",
    wsPort: edge.port,
    wsPath: `/from/${encodeURIComponent(address)}`,
    ...options,
  });
  clients.push(c);
  return c;
}

/**
 * `c`'s subscribe to `name` is refused with `expected` (fails the test if it subscribes), and the
 * refusal is counted once in /metrics under its status, and once among all refusals under `reason`
 * (the native door's: `subscriptions` for both caps, `anonymous_subscribers` and `max_subscribers`
 * for the 503s of a full channel).
 */
async function refusedAndCounted(
  c: PusherJS,
  name: string,
  expected: { type: string; error: string; status: number },
  reason: string,
): Promise<void> {
  const errors = () => metric("floodgate_pusher_errors_total{", ['kind="subscription"', `code="${expected.status}"`]);
  const refusals = () => metric("floodgate_refusals_total{", [`reason="${reason}"`]);
  const [errorsBefore, refusalsBefore] = [await errors(), await refusals()];
  const error = await subscribed(c, name).then(
    () => expect.fail(`${name} subscribed where it should be refused`),
    (e: { detail: unknown }) => e.detail,
  );
  expect(error).toEqual(expected);
  await until(async () => (await errors()) > errorsBefore, `the ${expected.status} in /metrics`);
  expect(await errors()).toBe(errorsBefore + 1);
  expect(await refusals()).toBe(refusalsBefore + 1);
}

async function admin(path: string): Promise<Response> {
  return await fetch(`${worker.base}${path}`, { headers: { authorization: `Bearer ${worker.admin}` } });
}

/** The value of the /metrics series starting with `prefix` and carrying every label of `labels` (0 if none). */
async function metric(prefix: string, labels: string[]): Promise<number> {
  const text = await (await admin("/metrics")).text();
  const line = text.split("\n").find((l) => l.startsWith(prefix) && labels.every((label) => l.includes(label)));
  return line ? Number(line.slice(line.lastIndexOf(" ") + 1)) : 0;
}

/** The channel's subscribers through either door (its stats). */
async function websockets(name: string): Promise<number> {
  return ((await (await admin(`/v1/channels/pusher:${name}/stats`)).json()) as { websockets: number }).websockets;
}

describe("a channel's refusals at the Pusher door, with pusher-js", () => {
  it("past MAX_SUBSCRIPTIONS_PER_CLIENT for its client: subscription_error 429 LimitReached, counted, nothing else changed", async () => {
    const name = uniq("client-cap-");
    await subscribed(from("198.51.100.1"), name);
    await refusedAndCounted(
      from("198.51.100.1"),
      name,
      {
        type: "LimitReached",
        error: "too many subscriptions of this channel for one client",
        status: 429,
      },
      "subscriptions",
    );
    expect(await websockets(name)).toBe(1);
    // Another client still gets in: the cap is the client's, not the channel's.
    await subscribed(from("198.51.100.2"), name);
    expect(await websockets(name)).toBe(2);
  });

  it("past 10 × MAX_SUBSCRIPTIONS_PER_CLIENT for the anonymous clients of one IPv6 /48: subscription_error 429 LimitReached, counted, nothing else changed", async () => {
    const name = uniq("net-cap-");
    // Ten /64s of one /48, each a client of its own with its one subscription.
    for (let i = 1; i <= 10; i++) await subscribed(from(`2001:db8:5:${i}::1`), name);
    await refusedAndCounted(
      from("2001:db8:5:11::1"),
      name,
      {
        type: "LimitReached",
        error: "too many subscriptions of this channel from one network (IPv6 /48)",
        status: 429,
      },
      "subscriptions",
    );
    expect(await websockets(name)).toBe(10);
    // A client of another /48 still gets in: the cap is the network's, not the channel's.
    await subscribed(from("2001:db8:6:1::1"), name);
    expect(await websockets(name)).toBe(11);
  });

  it("past ANONYMOUS_SHARE of MAX_SUBSCRIBERS on a public channel: subscription_error 503 ChannelFull, counted, nothing else changed", async () => {
    const name = uniq("anonymous-share-");
    // 0.4 × 30: twelve anonymous subscribers, far below the channel's 30.
    for (let i = 1; i <= 12; i++) await subscribed(from(`203.0.113.${i}`), name);
    await refusedAndCounted(
      from("203.0.113.13"),
      name,
      {
        type: "ChannelFull",
        error: "the channel has as many subscribers as it serves",
        status: 503,
      },
      "anonymous_subscribers",
    );
    expect(await websockets(name)).toBe(12);
  });

  it("past MAX_SUBSCRIBERS on a private channel (no anonymous share there): subscription_error 503 ChannelFull, counted, nothing else changed", async () => {
    const name = `private-${uniq("max-subscribers-")}`;
    const signed = { channelAuthorization: backendAuthorization() };
    for (let i = 1; i <= 30; i++) await subscribed(from(`198.51.100.${100 + i}`, signed), name);
    await refusedAndCounted(
      from("198.51.100.131", signed),
      name,
      {
        type: "ChannelFull",
        error: "the channel has as many subscribers as it serves",
        status: 503,
      },
      "max_subscribers",
    );
    expect(await websockets(name)).toBe(30);
  });
});

describe("names and members Floodgate does not take, with pusher-js", () => {
  /** The `error` events pusher-js's connection emits (a `pusher:error` from the server is one). */
  function connectionErrors(c: PusherJS): unknown[] {
    const errors: unknown[] = [];
    c.connection.bind("error", (e: unknown) => errors.push(e));
    return errors;
  }

  it("a private-encrypted- channel, signed with its key by the app's backend: subscription_error 403 AuthError on that channel, counted, the connection untouched", async () => {
    // An app with end-to-end encrypted channels: its backend's authorizeChannel adds the channel's key.
    const backend = server({ encryptionMasterKeyBase64: Buffer.alloc(32, 7).toString("base64") });
    const c = from("192.0.2.10", { channelAuthorization: backendAuthorization(undefined, backend) });
    const errors = connectionErrors(c);
    await refusedAndCounted(
      c,
      `private-encrypted-${uniq()}`,
      { type: "AuthError", error: "private-encrypted- channels are not supported", status: 403 },
      "permission_denied",
    );
    expect(errors).toEqual([]);
    await subscribed(c, uniq("after-encrypted-"));
  });

  it("a presence member the app signed but Floodgate does not take (user_info over 1 KiB, no user_id): subscription_error 403, counted, nothing joined", async () => {
    const name = `presence-${uniq()}`;
    for (const [i, member] of [{ user_id: "big", user_info: { x: "y".repeat(1100) } }, { user_info: {} }].entries()) {
      const c = from(`192.0.2.${20 + i}`, { channelAuthorization: backendAuthorization(() => member) });
      const errors = connectionErrors(c);
      await refusedAndCounted(
        c,
        name,
        { type: "AuthError", error: expect.stringContaining("channel_data"), status: 403 },
        "permission_denied",
      );
      expect(errors).toEqual([]);
    }
    expect(await websockets(name)).toBe(0);
  });
});

describe("retrying a refused channel, with pusher-js", () => {
  /**
   * The channels of the `pusher:subscribe` frames `c` sends from now on: every frame of pusher-js
   * goes through its connection manager's `send_event` (the channels' and `pusher.send_event`).
   */
  function subscribesSent(c: PusherJS): string[] {
    const sent: string[] = [];
    const send = c.connection.send_event.bind(c.connection);
    c.connection.send_event = (event: string, data: { channel?: string }, channel?: string) => {
      if (event === "pusher:subscribe") sent.push(String(data.channel));
      return send(event, data, channel);
    };
    return sent;
  }

  /** The `pusher` server library, pointed at this file's Floodgate. */
  function backend(): Pusher {
    const url = new URL(worker.base);
    return new Pusher({ ...PUSHER, host: url.hostname, port: url.port, useTLS: false });
  }

  it("a channel refused 429 stays pending: subscribe, or unsubscribe then subscribe, sends nothing; disconnect then connect subscribes it once its slot is free, and it gets its events", async () => {
    const name = uniq("retry-");
    const holder = from("198.51.100.60");
    await subscribed(holder, name);
    // The same client again: past its one subscription of the channel.
    const c = from("198.51.100.60");
    const sent = subscribesSent(c);
    await refusedAndCounted(
      c,
      name,
      { type: "LimitReached", error: "too many subscriptions of this channel for one client", status: 429 },
      "subscriptions",
    );
    expect(sent).toEqual([name]);
    const channel = c.channel(name);
    const refusals: unknown[] = [];
    channel.bind("pusher:subscription_error", (e: unknown) => refusals.push(e));
    const refused = () => metric("floodgate_pusher_errors_total{", ['kind="subscription"', 'code="429"']);
    const refusedBefore = await refused();

    // The retries an app would try first: pusher-js sends nothing for either (both return at once).
    expect(c.subscribe(name)).toBe(channel);
    c.unsubscribe(name);
    expect(c.subscribe(name)).toBe(channel);
    expect(sent).toEqual([name]);
    // The connection still works: another channel subscribes on it. Nothing came back for the
    // refused one, which pusher-js still holds as pending, and the server counted no refusal.
    const other = uniq("retry-other-");
    await subscribed(c, other);
    expect(sent).toEqual([name, other]);
    expect(refusals).toEqual([]);
    expect(channel.subscribed).toBe(false);
    expect(channel.subscriptionPending).toBe(true);
    expect(await refused()).toBe(refusedBefore);
    expect(await websockets(name)).toBe(1);

    // The holder leaves. Once the channel has let its slot go, subscribing again still sends
    // nothing: what stops it is pusher-js, not the server. A new connection of the refused client
    // subscribes every channel it holds, the refused one among them.
    holder.disconnect();
    await until(async () => (await websockets(name)) === 0, "the holder's slot to be let go");
    c.subscribe(name);
    expect(sent).toEqual([name, other]);
    const events: unknown[] = [];
    channel.bind("news", (data: unknown) => events.push(data));
    const succeeded = new Promise<void>((resolve) => channel.bind("pusher:subscription_succeeded", () => resolve()));
    c.disconnect();
    c.connect();
    await succeeded;
    expect(sent).toEqual([name, other, name, other]);
    expect(channel.subscribed).toBe(true);
    expect(refusals).toEqual([]);
    await backend().trigger(name, "news", { n: 1 });
    await until(() => events.length > 0, "the event on the channel subscribed again");
    expect(events).toEqual([{ n: 1 }]);
    expect(await refused()).toBe(refusedBefore);
  });
});
