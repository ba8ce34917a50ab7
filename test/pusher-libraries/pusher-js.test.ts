/**
 * The Pusher door as Pusher's own libraries use it (docs/api.md, "The Pusher door"): pusher-js on one
 * connection to a public, a private and a presence channel, events sent with the `pusher` server
 * library's `trigger` and `triggerBatch`, its `get` and `authorizeChannel`; signatures refused as they
 * must be, with nothing changed.
 */
import { afterEach, describe, expect, it, vi } from "vitest";
import { admin, backendAuthorization, client, floodgate, server, subscribed, token, uniq, until } from "./floodgate";

/** A channel's epoch in a publish answer (docs/api.md, "Numbering restarts"). */
const EPOCH = expect.stringMatching(/^[A-Za-z0-9_-]{12}$/);

const clients: { disconnect(): void }[] = [];
afterEach(() => {
  for (const c of clients.splice(0)) c.disconnect();
  vi.restoreAllMocks();
});

async function subscriptionCount(name: string): Promise<number> {
  const res = await server().get({ path: `/channels/${name}`, params: { info: "subscription_count" } });
  return ((await res.json()) as { subscription_count: number }).subscription_count;
}

describe("pusher-js and pusher.trigger", () => {
  it("one connection holds a public, a private and a presence channel; each event arrives once, data as sent; unsubscribe stops them", async () => {
    const [pub, priv, pres] = [uniq("pub-"), `private-${uniq()}`, `presence-${uniq()}`];
    const c = client({
      channelAuthorization: backendAuthorization(() => ({ user_id: "ada", user_info: { name: "Ada" } })),
    });
    clients.push(c);
    const channels = await Promise.all([pub, priv, pres].map((n) => subscribed(c, n)));
    const got: Record<string, unknown[]> = { [pub]: [], [priv]: [], [pres]: [] };
    channels.forEach((ch, i) => {
      ch.bind("order", (data: unknown) => got[[pub, priv, pres][i] as string]?.push(data));
    });
    const data = { id: 42, text: "héllo ✓", nested: { list: [1, 2.5, null] } };
    await server().trigger([pub, priv, pres], "order", data);
    await server().trigger(priv, "order", "plain text, not JSON");
    await until(
      () => Object.values(got).every((list) => list.length >= 1) && (got[priv]?.length ?? 0) >= 2,
      "the events",
    );
    expect(got[pub]).toEqual([data]);
    expect(got[pres]).toEqual([data]);
    expect(got[priv]).toEqual([data, "plain text, not JSON"]);
    // One connection: the channels' stats count one subscription each, through one host.
    const stats = (await (await admin(`/v1/channels/pusher:${pub}/stats`)).json()) as { websockets: number };
    expect(stats.websockets).toBe(1);
    c.unsubscribe(pub);
    await until(async () => (await subscriptionCount(pub)) === 0, "the unsubscribe");
    await server().trigger([pub, priv], "order", { after: true });
    await until(() => (got[priv]?.length ?? 0) === 3, "the private channel's third event");
    expect(got[pub]).toEqual([data]);
  });

  it("data up to MAX_MESSAGE_BYTES arrives whole, however much JSON escaping lengthens it stored; a byte more is 413", async () => {
    const name = `private-${uniq()}`;
    const c = client({ channelAuthorization: backendAuthorization() });
    clients.push(c);
    const ch = await subscribed(c, name);
    const got: unknown[] = [];
    ch.bind("big", (d: unknown) => got.push(d));
    // The library sends an object's JSON text as `data`: 32,768 bytes here, quotes on every field, so
    // the stored {"event","data"} escapes it to well over 32,768.
    const filler = 'say "hi"';
    const data = { text: "" };
    data.text = filler.repeat(
      Math.floor((32_768 - JSON.stringify(data).length) / JSON.stringify(filler).slice(1, -1).length),
    );
    data.text += "x".repeat(32_768 - JSON.stringify(data).length);
    expect(new TextEncoder().encode(JSON.stringify(data)).length).toBe(32_768);
    await server().trigger(name, "big", data);
    await until(() => got.length === 1, "the big event");
    expect(got).toEqual([data]);
    const over = await server()
      .trigger(name, "big", { ...data, text: `${data.text}x` })
      .then(
        () => 200,
        (e: { status: number }) => e.status,
      );
    expect(over).toBe(413);
  });

  it("triggerBatch publishes each event to its channel", async () => {
    const [a, b] = [uniq("ba-"), uniq("bb-")];
    const c = client();
    clients.push(c);
    const [ca, cb] = await Promise.all([subscribed(c, a), subscribed(c, b)]);
    const seen: string[] = [];
    ca.bind("e", (d: { n: number }) => seen.push(`a${d.n}`));
    cb.bind("e", (d: { n: number }) => seen.push(`b${d.n}`));
    const res = await server().triggerBatch([
      { channel: a, name: "e", data: { n: 1 } },
      { channel: b, name: "e", data: { n: 2 } },
      { channel: a, name: "e", data: { n: 3 } },
    ]);
    const body = (await res.json()) as { floodgate: Record<string, { status: string }>[] };
    expect(body.floodgate.map((f) => Object.values(f)[0]?.status)).toEqual(["delivered", "delivered", "delivered"]);
    await until(() => seen.length === 3, "three events");
    expect(seen.filter((s) => s.startsWith("a"))).toEqual(["a1", "a3"]);
  });

  it("socket_id on trigger excludes that connection", async () => {
    const name = uniq("ex-");
    const [x, y] = [client(), client()];
    clients.push(x, y);
    const [cx, cy] = await Promise.all([subscribed(x, name), subscribed(y, name)]);
    const gx: unknown[] = [];
    const gy: unknown[] = [];
    cx.bind("e", (d: unknown) => gx.push(d));
    cy.bind("e", (d: unknown) => gy.push(d));
    await server().trigger(name, "e", "not for x", { socket_id: x.connection.socket_id });
    await server().trigger(name, "e", "for both");
    await until(() => gy.length === 2 && gx.length === 1, "the events");
    expect(gx).toEqual(["for both"]);
  });

  it("get: occupied channels, one channel's counts, a presence channel's users", async () => {
    const tag = uniq("get");
    const pres = `presence-${tag}`;
    const c = client({ channelAuthorization: backendAuthorization(() => ({ user_id: "u-1" })) });
    clients.push(c);
    await subscribed(c, pres);
    const api = server();
    await until(async () => {
      const res = await api.get({ path: "/channels", params: { filter_by_prefix: "presence-", info: "user_count" } });
      const { channels } = (await res.json()) as { channels: Record<string, { user_count: number }> };
      return channels[pres]?.user_count === 1;
    }, "the presence channel listed");
    const one = await api.get({ path: `/channels/${pres}`, params: { info: "user_count,subscription_count" } });
    expect(await one.json()).toEqual({ occupied: true, user_count: 1, subscription_count: 1 });
    const users = await api.get({ path: `/channels/${pres}/users` });
    expect(await users.json()).toEqual({ users: [{ id: "u-1" }] });
  });
});

describe("event names only the server sends", () => {
  it("pusher.trigger of a pusher_internal: or pusher: event is refused (400): no fake member reaches pusher-js", async () => {
    const pres = `presence-${uniq()}`;
    const c = client({ channelAuthorization: backendAuthorization(() => ({ user_id: "ada" })) });
    clients.push(c);
    const ch = (await subscribed(c, pres)) as unknown as {
      members: { count: number };
      bind(e: string, f: (d: unknown) => void): void;
    };
    const added: unknown[] = [];
    const got: unknown[] = [];
    ch.bind("pusher:member_added", (m) => added.push(m));
    ch.bind("real", (d) => got.push(d));
    const status = (p: Promise<unknown>) =>
      p.then(
        () => 200,
        (e: { status: number }) => e.status,
      );
    const ghost = { user_id: "ghost", user_info: {} };
    expect(await status(server().trigger(pres, "pusher_internal:member_added", ghost))).toBe(400);
    expect(await status(server().trigger(pres, "pusher:subscription_succeeded", {}))).toBe(400);
    const batch = [
      { channel: pres, name: "real", data: "1" },
      { channel: pres, name: "pusher_internal:member_added", data: ghost },
    ];
    expect(await status(server().triggerBatch(batch))).toBe(400);
    await server().trigger(pres, "real", "after");
    await until(() => got.length === 1, "the real event");
    expect(got).toEqual(["after"]);
    expect(added).toEqual([]);
    expect(ch.members.count).toBe(1);
  });
});

describe("signatures", () => {
  it("a good authorization subscribes; a bad one is pusher:subscription_error 401 and subscribes nothing", async () => {
    const name = `private-${uniq()}`;
    const forger = server({ secret: "not-the-app-secret-0" });
    const c = client({
      channelAuthorization: {
        endpoint: "unused",
        transport: "ajax",
        customHandler: (
          p: { socketId: string; channelName: string },
          cb: (e: Error | null, d: { auth: string }) => void,
        ) => cb(null, forger.authorizeChannel(p.socketId, p.channelName)),
      },
    });
    clients.push(c);
    const error = await subscribed(c, name).then(
      () => null,
      (e: { detail: unknown }) => e.detail,
    );
    expect(error).toMatchObject({ type: "AuthError", status: 401 });
    expect(await subscriptionCount(name)).toBe(0);
    const good = client({ channelAuthorization: backendAuthorization() });
    clients.push(good);
    await subscribed(good, name);
    expect(await subscriptionCount(name)).toBe(1);
  });

  it("HTTP API calls with a wrong secret or a stale timestamp answer 401 and publish nothing", async () => {
    const name = uniq("sig-");
    const c = client();
    clients.push(c);
    const ch = await subscribed(c, name);
    const got: unknown[] = [];
    ch.bind("e", (d: unknown) => got.push(d));
    const wrong = await server({ secret: "not-the-app-secret-0" })
      .trigger(name, "e", "forged")
      .then(
        () => 200,
        (e: { status: number }) => e.status,
      );
    expect(wrong).toBe(401);
    const realNow = Date.now();
    vi.spyOn(Date, "now").mockReturnValue(realNow - 601_000);
    const stale = await server()
      .trigger(name, "e", "stale")
      .then(
        () => 200,
        (e: { status: number }) => e.status,
      );
    vi.restoreAllMocks();
    expect(stale).toBe(401);
    await server().trigger(name, "e", "signed right");
    await until(() => got.length > 0, "the signed event");
    expect(got).toEqual(["signed right"]);
  });
});

describe("the throttle", () => {
  it("at drop rate 1 an event is dropped, recorded and said so; priority high still arrives", async () => {
    const name = uniq("hot-");
    const c = client();
    clients.push(c);
    const ch = await subscribed(c, name);
    const got: unknown[] = [];
    ch.bind("e", (d: unknown) => got.push(d));
    const put = await admin(`/v1/admin/throttle/pusher:${name}`, { method: "PUT", body: JSON.stringify({ rate: 1 }) });
    expect(put.status).toBe(200);
    const dropped = await (await server().trigger(name, "e", { n: 1 })).json();
    expect(dropped).toEqual({ floodgate: { [name]: { status: "dropped" } } });
    const kept = await (await server().trigger(name, "e", { n: 2 }, { priority: "high" } as never)).json();
    expect(kept).toEqual({ floodgate: { [name]: { status: "delivered", epoch: EPOCH, seq: 1 } } });
    await until(() => got.length === 1, "the priority event");
    expect(got).toEqual([{ n: 2 }]);
    // The record's live view: the analytics channel's copy of the drop, with the app key as its publisher.
    const reader = await token(uniq("analyst"), ["private:floodgate.analytics.dropped"]);
    const copies = async () => {
      const res = await fetch(
        `${floodgate.base}/v1/history/private:floodgate.analytics.dropped?source_channel=pusher:${name}`,
        { headers: { authorization: `Bearer ${reader}` } },
      );
      return ((await res.json()) as { messages: { data: Record<string, unknown> }[] }).messages.map((m) => m.data);
    };
    await until(async () => (await copies()).length === 1, "the drop's copy in the record");
    expect((await copies())[0]).toMatchObject({
      source_channel: `pusher:${name}`,
      message: { event: "e", data: '{"n":1}' },
      publisher: "lib-key",
      drop_rate: 1,
    });
  });
});
