/**
 * The Pusher HTTP API in workerd (docs/api.md, "The Pusher door"), signed as the Pusher libraries
 * sign (the library itself is driven in test/pusher-libraries/): events to many channels with each
 * copy's fate, socket_id exclusion, info, batch events, the channel listings, and every refusal in
 * Pusher's shape (401 signature, 404 app, 400 body, 413 size) with nothing published.
 */
import { afterEach, describe, expect, it } from "vitest";
import { ActiveChannels } from "../../../src/active-channels/active-channels";
import { LimiterShard } from "../../../src/limiter/limiter-shard";
import {
  adminHeaders,
  call,
  env,
  envWith,
  grown,
  historyOf,
  mint,
  scrapeMetrics,
  setRate,
  uniq,
  until,
  withFailing,
} from "../../support/helpers";
import { APP, authFor, closePushers, openPusher, signedApiCall } from "../../support/pusher";

/** A channel's epoch in a publish answer (docs/api.md, "Numbering restarts"). */
const EPOCH = expect.stringMatching(/^[A-Za-z0-9_-]{12}$/);

const EVENTS = `/apps/${APP.id}/events`;

async function reader(): Promise<string> {
  return (await mint({ sub: uniq("r"), channels: ["pusher:**"], scopes: ["subscribe"] })).access_token;
}

afterEach(async () => {
  await env.THROTTLE_KV.delete("throttleRate");
});

afterEach(closePushers);
describe("POST /apps/{id}/events", () => {
  it("publishes to every channel listed; each copy's fate in the floodgate member; data exactly as sent", async () => {
    const [a, b] = [uniq("a-"), uniq("b-")];
    const p = await openPusher();
    await p.subscribe(a);
    await p.subscribe(b);
    const data = '{"x":"\\u00e9","n":[1,2]}';
    const res = await signedApiCall("POST", EVENTS, {}, { name: "update", data, channels: [a, b] });
    expect(res.status).toBe(200);
    const body = (await res.json()) as { floodgate: Record<string, { status: string; seq: number }> };
    expect(body).toEqual({
      floodgate: {
        [a]: { status: "delivered", epoch: EPOCH, seq: 1 },
        [b]: { status: "delivered", epoch: EPOCH, seq: 1 },
      },
    });
    await p.next((e) => e.channel === a && e.event === "update" && e.data === data);
    await p.next((e) => e.channel === b && e.event === "update" && e.data === data);
    const [m] = await historyOf(`pusher:${a}`, await reader());
    expect(m?.data).toEqual({ event: "update", data });
    p.ws.close();
  });

  it("socket_id excludes that connection; info answers the counts", async () => {
    const name = `presence-${uniq()}`;
    const [x, y] = [await openPusher(), await openPusher()];
    await x.subscribe(name, await authFor(x, name, { user_id: "x" }));
    await y.subscribe(name, await authFor(y, name, { user_id: "y" }));
    const res = await signedApiCall(
      "POST",
      EVENTS,
      {},
      { name: "e", data: "1", channels: [name], socket_id: x.socketId, info: "subscription_count,user_count" },
    );
    expect(await res.json()).toEqual({
      channels: { [name]: { subscription_count: 2, user_count: 2 } },
      floodgate: { [name]: { status: "delivered", epoch: EPOCH, seq: 1 } },
    });
    await y.next((e) => e.event === "e");
    await x.barrier();
    expect(x.events.filter((e) => e.event === "e")).toEqual([]);
    x.ws.close();
    y.ws.close();
  });

  it("at drop rate 1: dropped and recorded, said so in the floodgate member; priority high still arrives", async () => {
    const name = uniq("hot-");
    const channel = `pusher:${name}`;
    const p = await openPusher();
    await p.subscribe(name);
    await setRate(channel, 1);
    const dropped = await signedApiCall("POST", EVENTS, {}, { name: "e", data: "lost", channels: [name] });
    expect(await dropped.json()).toEqual({ floodgate: { [name]: { status: "dropped" } } });
    const high = await signedApiCall(
      "POST",
      EVENTS,
      {},
      { name: "e", data: "kept", channels: [name], priority: "high" },
    );
    expect(await high.json()).toEqual({ floodgate: { [name]: { status: "delivered", epoch: EPOCH, seq: 1 } } });
    await p.next((e) => e.event === "e" && e.data === "kept");
    expect(p.events.filter((e) => e.data === "lost")).toEqual([]);
    const analyst = (
      await mint({ sub: uniq("an"), channels: ["private:floodgate.analytics.dropped"], scopes: ["subscribe"] })
    ).access_token;
    const copies = async () =>
      (
        await historyOf(
          "private:floodgate.analytics.dropped",
          analyst,
          `?source_channel=${encodeURIComponent(channel)}`,
        )
      ).map((f) => f.data as Record<string, unknown>);
    await until(async () => (await copies()).length === 1, "the dropped event's copy");
    expect((await copies())[0]).toMatchObject({
      source_channel: channel,
      message: { event: "e", data: "lost" },
      publisher: APP.key,
    });
    p.ws.close();
  });
});

describe("POST /apps/{id}/batch_events", () => {
  it("publishes each event to its channel and answers one fate map per event, in order", async () => {
    const [a, b] = [uniq("a-"), uniq("b-")];
    const res = await signedApiCall(
      "POST",
      `/apps/${APP.id}/batch_events`,
      {},
      {
        batch: [
          { channel: a, name: "one", data: "1" },
          { channel: b, name: "two", data: "2", info: "subscription_count" },
          { channel: a, name: "three", data: "3" },
        ],
      },
    );
    expect(await res.json()).toEqual({
      batch: [{}, { subscription_count: 0 }, {}],
      floodgate: [
        { [a]: { status: "delivered", epoch: EPOCH, seq: 1 } },
        { [b]: { status: "delivered", epoch: EPOCH, seq: 1 } },
        { [a]: { status: "delivered", epoch: EPOCH, seq: 2 } },
      ],
    });
  });

  it("more than 10 events, or one bad event: 400 and nothing published", async () => {
    const name = uniq("batch-");
    const eleven = Array.from({ length: 11 }, (_, i) => ({ channel: name, name: "e", data: String(i) }));
    expect((await signedApiCall("POST", `/apps/${APP.id}/batch_events`, {}, { batch: eleven })).status).toBe(400);
    const oneBad = [
      { channel: name, name: "e", data: "ok" },
      { channel: name, name: "e", data: 5 },
    ];
    const res = await signedApiCall("POST", `/apps/${APP.id}/batch_events`, {}, { batch: oneBad });
    expect(res.status).toBe(400);
    expect(res.headers.get("content-type")).toContain("text/plain");
    expect(await historyOf(`pusher:${name}`, await reader())).toEqual([]);
  });
});

describe("the publish budget of the app key: a request's copies are charged all or none", () => {
  /** A Worker whose app key is fresh (a bucket of its own), with a publish budget of 5 refilled 1 a minute. */
  const smallBudget = () => {
    const key = uniq("key-");
    return { key, env: envWith({ PUSHER_APP_KEY: key, PUBLISH_RATE: "1/m", PUBLISH_BURST: "5" }) };
  };
  const channels = (n: number) => Array.from({ length: n }, () => uniq("budget-"));
  const nothingIn = async (names: string[]) => {
    const token = await reader();
    for (const n of names) expect(await historyOf(`pusher:${n}`, token)).toEqual([]);
  };

  it("an event to more channels than the bucket holds: 429, nothing published, nothing taken", async () => {
    const app = smallBudget();
    const six = channels(6);
    const before = await scrapeMetrics(app.env);
    const over = await signedApiCall("POST", EVENTS, {}, { name: "e", data: "x", channels: six }, app);
    expect(over.status).toBe(429);
    expect(over.headers.get("content-type")).toContain("text/plain");
    expect(Number(over.headers.get("retry-after"))).toBeGreaterThanOrEqual(1);
    // It names the publish budget as every 429 does, so a client and /metrics tell which one.
    expect(over.headers.get("ratelimit-policy")).toBe('"publish";q=5;w=300');
    expect(over.headers.get("ratelimit")).toMatch(/^"publish";r=0;t=\d+$/);
    await until(async () => {
      const grew = grown(before, await scrapeMetrics(app.env));
      expect(grew['floodgate_refusals_total{reason="rate_limited"}']).toBeUndefined();
      return (grew['floodgate_refusals_total{reason="publish"}'] ?? 0) >= 1;
    }, "the 429 counted under the publish budget");
    await nothingIn(six);
    // All 5 tokens are still there: one channel, then four.
    const one = await signedApiCall("POST", EVENTS, {}, { name: "e", data: "x", channels: six.slice(0, 1) }, app);
    expect(one.status).toBe(200);
    const four = await signedApiCall("POST", EVENTS, {}, { name: "e", data: "x", channels: six.slice(1, 5) }, app);
    expect(four.status).toBe(200);
    const spent = await signedApiCall("POST", EVENTS, {}, { name: "e", data: "x", channels: six.slice(5) }, app);
    expect(spent.status).toBe(429);
    await nothingIn(six.slice(5));
  });

  it("batch_events: every copy of every event, or none", async () => {
    const app = smallBudget();
    const names = channels(5);
    const batch = (list: string[]) => ({ batch: list.map((channel) => ({ channel, name: "e", data: "x" })) });
    const BATCH = `/apps/${APP.id}/batch_events`;
    expect(
      (await signedApiCall("POST", EVENTS, {}, { name: "e", data: "x", channels: names.slice(0, 2) }, app)).status,
    ).toBe(200);
    // 3 left: a batch of 4 events takes none of them; a batch of 3 then passes.
    expect((await signedApiCall("POST", BATCH, {}, batch(names.slice(1, 5)), app)).status).toBe(429);
    await nothingIn(names.slice(2, 5));
    expect((await signedApiCall("POST", BATCH, {}, batch(names.slice(2, 5)), app)).status).toBe(200);
  });

  it("copies under different budgets (a per-channel rule): one refuses, the other's tokens come back", async () => {
    const key = uniq("key-");
    const rule = uniq("rule-");
    const app = {
      key,
      env: envWith({
        PUSHER_APP_KEY: key,
        PUBLISH_RATE: "1/m",
        PUBLISH_BURST: "5",
        PER_CHANNEL_PUBLISH_LIMITS: JSON.stringify({ [`pusher:${rule}.*`]: { rate: 1, per: "1m", burst: 2 } }),
      }),
    };
    const ruled = [`${rule}.a`, `${rule}.b`, `${rule}.c`];
    const plain = channels(5);
    // The rule's bucket holds 2 of the 3 copies: 429, and the app key's 5 tokens are given back.
    const mixed = { name: "e", data: "x", channels: [...plain.slice(0, 5), ...ruled] };
    expect((await signedApiCall("POST", EVENTS, {}, mixed, app)).status).toBe(429);
    await nothingIn([...plain, ...ruled]);
    const five = await signedApiCall("POST", EVENTS, {}, { name: "e", data: "x", channels: plain }, app);
    expect(five.status).toBe(200);
  });
});

describe("channels, channel, users", () => {
  it("list occupied channels (either door), one channel's counts, a presence channel's users", async () => {
    const tag = uniq("list");
    const name = `presence-${tag}`;
    const p = await openPusher();
    await p.subscribe(name, await authFor(p, name, { user_id: "u1" }));
    await p.subscribe(`${tag}-public`);
    await until(async () => {
      const res = await signedApiCall("GET", `/apps/${APP.id}/channels`, {
        filter_by_prefix: `presence-${tag}`,
        info: "user_count",
      });
      const body = (await res.json()) as { channels: Record<string, unknown> };
      return JSON.stringify(body.channels) === JSON.stringify({ [name]: { user_count: 1 } });
    }, "the presence channel listed");
    const one = await signedApiCall("GET", `/apps/${APP.id}/channels/${name}`, {
      info: "subscription_count,user_count",
    });
    expect(await one.json()).toEqual({ occupied: true, subscription_count: 1, user_count: 1 });
    const users = await signedApiCall("GET", `/apps/${APP.id}/channels/${name}/users`);
    expect(await users.json()).toEqual({ users: [{ id: "u1" }] });
    const empty = await signedApiCall("GET", `/apps/${APP.id}/channels/${uniq("nobody-")}`);
    expect(await empty.json()).toEqual({ occupied: false });
    p.ws.close();
    await until(async () => {
      const res = await signedApiCall("GET", `/apps/${APP.id}/channels`, { filter_by_prefix: `presence-${tag}` });
      return JSON.stringify(((await res.json()) as { channels: unknown }).channels) === "{}";
    }, "unlisted once empty");
  });
});

describe("refusals: Pusher's shape, counted, nothing published", () => {
  const name = uniq("refused-");
  const event = { name: "e", data: "x", channels: [name] };
  it.each([
    ["a wrong secret", () => signedApiCall("POST", EVENTS, {}, event, { secret: "another-secret-01234" }), 401],
    [
      "a stale timestamp",
      () => signedApiCall("POST", EVENTS, {}, event, { timestamp: Math.floor(Date.now() / 1000) - 601 }),
      401,
    ],
    ["another app's key", () => signedApiCall("POST", EVENTS, {}, event, { key: "other-key" }), 401],
    [
      "a body that does not match body_md5",
      () => signedApiCall("POST", EVENTS, {}, event, { tamper: (q) => q.set("body_md5", "0".repeat(32)) }),
      401,
    ],
    ["an unknown app id", () => signedApiCall("POST", "/apps/other-app/events", {}, event), 404],
    ["data that is not a string", () => signedApiCall("POST", EVENTS, {}, { ...event, data: { a: 1 } }), 400],
    [
      "101 channels",
      () => signedApiCall("POST", EVENTS, {}, { ...event, channels: Array.from({ length: 101 }, (_, i) => `c${i}`) }),
      400,
    ],
    ["a bad socket_id", () => signedApiCall("POST", EVENTS, {}, { ...event, socket_id: "abc" }), 400],
    [
      "data over MAX_MESSAGE_BYTES",
      () => signedApiCall("POST", EVENTS, {}, { ...event, data: "x".repeat(32_769) }),
      413,
    ],
    [
      "data within MAX_MESSAGE_BYTES made of control characters, its stored body over twice it",
      () => signedApiCall("POST", EVENTS, {}, { ...event, data: "\u0001".repeat(12_000) }),
      413,
    ],
    ["a body over 10 × MAX_MESSAGE_BYTES", () => signedApiCall("POST", EVENTS, {}, "x".repeat(327_681)), 413],
  ])("%s", async (_what, send, status) => {
    const res = await send();
    expect(res.status).toBe(status);
    expect(res.headers.get("content-type")).toContain("text/plain");
    expect(await historyOf(`pusher:${name}`, await reader())).toEqual([]);
  });

  it("MAX_MESSAGE_BYTES bounds data as sent, in UTF-8 bytes, however long its stored body is", async () => {
    const fits = uniq("fits-");
    // 32,768 bytes: control characters (6 bytes each once JSON-escaped in the stored body), two-byte
    // characters, and plain ones.
    const data = "\u0001".repeat(5000) + "é".repeat(1000) + "x".repeat(32_768 - 5000 - 2 * 1000);
    const ok = await signedApiCall("POST", EVENTS, {}, { name: "e", data, channels: [fits] });
    expect(ok.status).toBe(200);
    const [m] = await historyOf(`pusher:${fits}`, await reader());
    expect(m?.data).toEqual({ event: "e", data });
    expect(JSON.stringify(m?.data).length).toBeGreaterThan(32_768);
    const over = await signedApiCall("POST", EVENTS, {}, { name: "e", data: `${data}x`, channels: [fits] });
    expect(over.status).toBe(413);
    const batch = { batch: [{ channel: fits, name: "e", data: `${data}x` }] };
    expect((await signedApiCall("POST", `/apps/${APP.id}/batch_events`, {}, batch)).status).toBe(413);
    expect(await historyOf(`pusher:${fits}`, await reader())).toHaveLength(1);
    // The longest body that passes both bounds: 32,768 quotes (twice that escaped) under a name of
    // 200 three-byte characters, exactly 2 × 32,768 + 622 bytes stored.
    const quotes = '"'.repeat(32_768);
    const alone = uniq("longest-");
    const longest = await signedApiCall("POST", EVENTS, {}, { name: "€".repeat(200), data: quotes, channels: [alone] });
    expect(longest.status).toBe(200);
    const stored = (await historyOf(`pusher:${alone}`, await reader()))[0]?.data;
    expect(new TextEncoder().encode(JSON.stringify(stored)).length).toBe(2 * 32_768 + 622);
  });

  it("are counted by status in /metrics", async () => {
    await signedApiCall("POST", EVENTS, {}, event, { secret: "another-secret-01234" });
    await until(async () => {
      const text = await (await call("/metrics", { headers: adminHeaders() })).text();
      return /floodgate_pusher_errors_total\{kind="http",code="401"\} [1-9]/.test(text);
    }, "401s counted");
  });
});

describe("failures: short text, no backend text, nothing published", () => {
  it("a limiter that fails answers 500 Internal error", async () => {
    const key = uniq("key-");
    const app = { key, env: envWith({ PUSHER_APP_KEY: key }) };
    const name = uniq("limiter-down-");
    const before = await scrapeMetrics(app.env);
    const res = await withFailing(LimiterShard, "decide", "SQLITE_FULL: secret backend detail", () =>
      signedApiCall("POST", EVENTS, {}, { name: "e", data: "x", channels: [name] }, app),
    );
    expect(res.status).toBe(500);
    expect(res.headers.get("content-type")).toContain("text/plain");
    expect(await res.text()).toBe("Internal error\n");
    expect(await historyOf(`pusher:${name}`, await reader())).toEqual([]);
    await until(
      async () =>
        (grown(before, await scrapeMetrics(app.env))['floodgate_pusher_errors_total{kind="http",code="500"}'] ?? 0) >=
        1,
      "the 500 counted",
    );
  });

  it("a list of occupied channels that cannot be reached answers 503 unavailable", async () => {
    const res = await withFailing(ActiveChannels, "pusherChannels", "SQLITE_BUSY: secret backend detail", () =>
      signedApiCall("GET", `/apps/${APP.id}/channels`),
    );
    expect(res.status).toBe(503);
    expect(res.headers.get("content-type")).toContain("text/plain");
    expect(res.headers.get("floodgate-refusal")).toBe("unavailable");
    expect(await res.text()).not.toMatch(/SQLITE|secret/);
  });
});

describe("POST /v1/pusher/auth", () => {
  it("turns a Floodgate token into the authorization pusher-js asks for; presence carries the token's sub", async () => {
    const token = (await mint({ sub: "carol", channels: ["pusher:presence-room.*"], scopes: ["subscribe"] }))
      .access_token;
    const p = await openPusher();
    const name = `presence-room.${uniq()}`;
    const res = await call("/v1/pusher/auth", {
      method: "POST",
      headers: { authorization: `Bearer ${token}`, "content-type": "application/x-www-form-urlencoded" },
      body: `socket_id=${p.socketId}&channel_name=${name}`,
    });
    expect(res.status).toBe(200);
    const auth = (await res.json()) as { auth: string; channel_data: string };
    expect(JSON.parse(auth.channel_data)).toEqual({ user_id: "carol" });
    expect((await p.subscribe(name, auth)).event).toBe("pusher_internal:subscription_succeeded");
    // Not granted, or no token: 403 / 401 in the API's error shape.
    const denied = await call("/v1/pusher/auth", {
      method: "POST",
      headers: { authorization: `Bearer ${token}`, "content-type": "application/x-www-form-urlencoded" },
      body: `socket_id=${p.socketId}&channel_name=private-other.x`,
    });
    expect(denied.status).toBe(403);
    const anonymous = await call("/v1/pusher/auth", {
      method: "POST",
      headers: { "content-type": "application/x-www-form-urlencoded" },
      body: `socket_id=${p.socketId}&channel_name=${name}`,
    });
    expect(anonymous.status).toBe(401);
    expect(((await anonymous.json()) as { code: string }).code).toBe("unauthenticated");
    p.ws.close();
  });

  it("a public channel needs no authorization, but one asked for is answered as its token allows", async () => {
    const token = (await mint({ sub: uniq("dave"), channels: ["pusher:lobby.*"], scopes: ["subscribe"] })).access_token;
    const p = await openPusher();
    const ask = (channel: string) =>
      call("/v1/pusher/auth", {
        method: "POST",
        headers: { authorization: `Bearer ${token}`, "content-type": "application/x-www-form-urlencoded" },
        body: `socket_id=${p.socketId}&channel_name=${channel}`,
      });
    const name = `lobby.${uniq()}`;
    const res = await ask(name);
    expect(res.status).toBe(200);
    expect(await res.json()).toEqual(await authFor(p, name));
    expect((await ask(`hall.${uniq()}`)).status).toBe(403);
    p.ws.close();
  });
});
