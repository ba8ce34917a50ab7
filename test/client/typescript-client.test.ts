/**
 * The TypeScript client (packages/client/src) against the real Worker in workerd: publish retries and
 * idempotency, typed errors, subscribe with reconnect and resume, SSE fallback, token refresh.
 */
import { evictDurableObject, runInDurableObject } from "cloudflare:test";
import { env, exports } from "cloudflare:workers";
import {
  type ConnectionState,
  FloodgateClient,
  FloodgateError,
  type Message,
  mintTokens,
  RateLimitedError,
  refreshTokens,
  type SocketLike,
} from "@floodgate/client";
import { describe, expect, it } from "vitest";
import { ChannelObject } from "../../src/channel/channel-object";
import { shardStub } from "../../src/limiter/limiter-shard";
import { relayName } from "../../src/relay/placement";
import type { Relay } from "../../src/relay/relay";
import { services } from "../../src/worker/services";
import {
  ADMIN,
  adminHeaders,
  BASE,
  historyOf,
  mint,
  publishTo,
  setRate,
  uniq,
  until,
  withFailing,
} from "../support/helpers";

const workerFetch = (input: string, init?: RequestInit) => exports.default.fetch(new Request(input, init));

/** A client on the real Worker that counts the HTTP requests it makes (retries included). */
function countingClient(accessToken: string) {
  const counter = { calls: 0 };
  const fg = new FloodgateClient({
    baseUrl: BASE,
    accessToken,
    fetch: (i, init) => {
      counter.calls++;
      return workerFetch(i, init);
    },
  });
  return { fg, counter };
}

/** Opens WebSockets through the Worker itself; keeps them so a test can cut one like a network would. */
function socketOpener() {
  const sockets: WebSocket[] = [];
  const open = async (url: string, protocols: string[]): Promise<SocketLike> => {
    const res = await exports.default.fetch(
      new Request(url.replace(/^ws/, "http"), {
        headers: { upgrade: "websocket", "sec-websocket-protocol": protocols.join(", ") },
      }),
    );
    if (res.status !== 101 || !res.webSocket) throw new Error(`upgrade failed: ${res.status}`);
    res.webSocket.accept();
    sockets.push(res.webSocket);
    return res.webSocket as unknown as SocketLike;
  };
  return { open, sockets };
}

describe("client publish", () => {
  it("delivers, and answers a drop as a result without retrying it", async () => {
    const ch = `public:client.${uniq()}`;
    const { access_token } = await mint({ sub: uniq(), channels: ["public:client.*"] });
    const { fg, counter } = countingClient(access_token);
    const r = await fg.publish(ch, { hello: "world" });
    expect(r).toMatchObject({ status: "delivered", channel: ch, seq: 1 });
    await setRate(ch, 1);
    counter.calls = 0;
    expect(await fg.publish(ch, { dropped: true })).toEqual({ status: "dropped" });
    expect(counter.calls).toBe(1);
  });

  it("waits out Retry-After on 429 and then succeeds (the bucket's clock moved instead of sleeping)", async () => {
    const sub = uniq("rl");
    const ch = `public:client.${uniq()}`;
    const { access_token } = await mint({ sub, channels: ["public:client.*"], rl: "1/s" });
    const key = `publish:${sub}`;
    const bucket = shardStub(env, key);
    const waits: number[] = [];
    const fg = new FloodgateClient({
      baseUrl: BASE,
      accessToken: access_token,
      fetch: workerFetch,
      random: () => 0, // no jitter: the wait is exactly what the server asked
      sleep: async (ms) => {
        // Time passes by `ms` for the bucket and for this isolate's deny cache.
        waits.push(ms);
        await runInDurableObject(bucket, (_o, state) => {
          state.storage.sql.exec("UPDATE bucket SET updated_at = updated_at - ? WHERE key = ?", ms, key);
        });
        // The object decides from its copy in memory: a new instance reads the moved clock.
        await evictDurableObject(bucket);
        (services(env).gate as unknown as { deny: Map<string, unknown> }).deny.clear();
      },
    });
    expect((await fg.publish(ch, 1)).status).toBe("delivered");
    expect((await fg.publish(ch, 2)).status).toBe("delivered"); // 429 first, then a retry
    expect(waits).toHaveLength(1);
    expect(waits[0]).toBeGreaterThanOrEqual(1000); // Retry-After: 1 → at least a second
    expect(waits[0]).toBeLessThanOrEqual(1000);
  });

  it("gives up after maxRetries with a typed RateLimitedError, each wait capped and jittered", async () => {
    const sub = uniq("flood");
    const { access_token } = await mint({ sub, channels: ["public:client.*"], rl: "1/h" });
    const waits: number[] = [];
    const fg = new FloodgateClient({
      baseUrl: BASE,
      accessToken: access_token,
      fetch: workerFetch,
      maxRetries: 2,
      maxBackoffMs: 2000,
      sleep: async (ms) => void waits.push(ms),
    });
    const ch = `public:client.${uniq()}`;
    await fg.publish(ch, 1);
    const err = await fg.publish(ch, 2).catch((e: unknown) => e);
    expect(err).toBeInstanceOf(RateLimitedError);
    expect(err).toMatchObject({ status: 429, code: "resource_exhausted", metaCode: "RATE_LIMITED" });
    expect((err as RateLimitedError).retryAfterMs).toBeGreaterThan(3_000_000);
    expect(waits).toHaveLength(2);
    for (const w of waits) {
      expect(w).toBeGreaterThanOrEqual(2000);
      expect(w).toBeLessThanOrEqual(2400);
    }
  });

  it("retries after a lost response with the same Idempotency-Key, so the message lands once", async () => {
    const ch = `public:client.${uniq()}`;
    const { access_token } = await mint({ sub: uniq(), channels: ["public:client.*"] });
    const keys: string[] = [];
    let lose = true;
    const fg = new FloodgateClient({
      baseUrl: BASE,
      accessToken: access_token,
      sleep: async () => {},
      fetch: async (i, init) => {
        keys.push(new Headers(init?.headers).get("idempotency-key") ?? "");
        const res = await workerFetch(i, init);
        if (lose) {
          lose = false;
          throw new TypeError("connection reset"); // the server delivered; the answer was lost
        }
        return res;
      },
    });
    const r = await fg.publish(ch, { once: true });
    expect(r).toMatchObject({ status: "delivered", seq: 1 });
    expect(keys).toHaveLength(2);
    expect(keys[0]).toBe(keys[1]);
    expect((await historyOf(ch, null)).map((f) => f.data)).toEqual([{ once: true }]);
  });

  it("throws typed errors that mirror the API's codes, without retrying them", async () => {
    const { access_token } = await mint({ sub: uniq(), channels: ["public:client.*"] });
    const { fg, counter } = countingClient(access_token);
    const denied = await fg.publish("public:other.thing", 1).catch((e: unknown) => e);
    expect(denied).toBeInstanceOf(FloodgateError);
    expect(denied).toMatchObject({ status: 403, code: "permission_denied", metaCode: "PERMISSION_DENIED" });
    const bad = await fg.publish("not a channel", 1).catch((e: unknown) => e);
    expect(bad).toMatchObject({ status: 400, code: "invalid_argument" });
    expect(counter.calls).toBe(2);
  });

  it("a 503 carries its reason (Floodgate-Refusal) as `refusal`: here a channel object that failed", async () => {
    const { access_token } = await mint({ sub: uniq(), channels: ["public:client.*"] });
    const { fg } = countingClient(access_token);
    const failed = await withFailing(ChannelObject, "publishMany", "SQLITE_BUSY: backend detail", () =>
      fg.publish(`public:client.${uniq()}`, 1, { retries: 0 }).catch((e: unknown) => e),
    );
    expect(failed).toBeInstanceOf(FloodgateError);
    expect(failed).toMatchObject({ status: 503, code: "unavailable", refusal: "unavailable" });
    const denied = await fg.publish("public:other.thing", 1).catch((e: unknown) => e);
    expect(denied).toMatchObject({ status: 403, refusal: null });
  });

  it("refreshes the access token before it expires, and hands the new pair to onTokens", async () => {
    const pair = await mint({ sub: uniq("r"), channels: ["public:client.*"], ttl: "1m" });
    const seen: string[] = [];
    const fg = new FloodgateClient({
      baseUrl: BASE,
      accessToken: pair.access_token,
      refreshToken: pair.refresh_token,
      refreshMarginMs: 120_000, // the 1-minute token is "about to expire"
      fetch: workerFetch,
      onTokens: (p) => seen.push(p.access_token),
    });
    expect((await fg.publish(`public:client.${uniq()}`, 1)).status).toBe("delivered");
    expect(seen).toHaveLength(1);
    expect(seen[0]).not.toBe(pair.access_token);
    // The old refresh token is spent: the client now holds the new one.
    const res = await workerFetch(`${BASE}/v1/tokens/refresh`, {
      method: "POST",
      body: JSON.stringify({ refresh_token: pair.refresh_token }),
    });
    expect(res.status).toBe(401);
  });
});

describe("client subscribe", () => {
  it("reconnects after a dropped socket and resumes from the last seq: no gaps, no repeats", async () => {
    const ch = `public:client.${uniq()}`;
    const { access_token } = await mint({ sub: uniq(), channels: ["public:client.*"] });
    const ws = socketOpener();
    const errors: unknown[] = [];
    const fg = new FloodgateClient({ baseUrl: BASE, openWebSocket: ws.open, sleep: async () => {} });
    const got: Message[] = [];
    const sub = fg.subscribe(ch, (m) => got.push(m), { onError: (e) => errors.push(e) });
    await until(() => ws.sockets.length === 1, "the first socket");
    for (let i = 1; i <= 3; i++) await publishTo(ch, access_token, { i });
    await until(() => got.length === 3, "3 messages");
    ws.sockets[0]?.close(1011, "network went away");
    for (let i = 4; i <= 6; i++) await publishTo(ch, access_token, { i }); // published while away
    await until(() => got.length === 6 && ws.sockets.length === 2, "the resumed stream");
    for (let i = 7; i <= 8; i++) await publishTo(ch, access_token, { i });
    await until(() => got.length === 8, "8 messages");
    expect(got.map((m) => m.seq)).toEqual([1, 2, 3, 4, 5, 6, 7, 8]);
    expect(got.map((m) => (m.data as { i: number }).i)).toEqual([1, 2, 3, 4, 5, 6, 7, 8]);
    expect(sub.lastSeq).toBe(8);
    expect(errors.length).toBeGreaterThanOrEqual(1);
    sub.close();
  });

  it("falls back to Server-Sent Events when WebSockets keep failing", async () => {
    const ch = `public:client.${uniq()}`;
    const { access_token } = await mint({ sub: uniq(), channels: ["public:client.*"] });
    await publishTo(ch, access_token, { before: true });
    const fg = new FloodgateClient({
      baseUrl: BASE,
      fetch: workerFetch,
      sleep: async () => {},
      openWebSocket: () => Promise.reject(new Error("blocked by a proxy")),
    });
    const got: Message[] = [];
    const sub = fg.subscribe(ch, (m) => got.push(m), { after: 0 });
    await until(() => sub.transport === "sse", "the switch to SSE");
    await until(() => got.length === 1, "the retained message");
    await publishTo(ch, access_token, { live: true });
    await until(() => got.length === 2, "the live message");
    expect(got.map((m) => m.data)).toEqual([{ before: true }, { live: true }]);
    sub.close();
  });
});

describe("client subscribe across a token's expiry", () => {
  /** Runs the channel's relay's alarm work as if it were `now` (the relay closes what expired by then). */
  const relayTick = (ch: string, now: number) =>
    runInDurableObject(
      env.RELAY.get(env.RELAY.idFromName(relayName(ch, "local", 0))) as DurableObjectStub<Relay>,
      (r) => r.tick(now),
    );

  for (const transport of ["websocket", "sse"] as const) {
    it(`${transport}: closed at the token's exp, it refreshes and resumes with ?after= without telling the application`, async () => {
      const ch = `public:client.${uniq()}`;
      const pub = (await mint({ sub: uniq(), channels: ["public:client.*"] })).access_token;
      const pair = await mint({ sub: uniq("exp"), channels: ["public:client.*"] });
      const ws = socketOpener();
      const errors: unknown[] = [];
      const refreshed: string[] = [];
      const opened: string[] = [];
      const fg = new FloodgateClient({
        baseUrl: BASE,
        accessToken: pair.access_token,
        refreshToken: pair.refresh_token,
        onTokens: (p) => refreshed.push(p.access_token),
        openWebSocket: (url, protocols) => {
          opened.push(url);
          return ws.open(url, protocols);
        },
        fetch: (i, init) => {
          if (i.includes("/v1/subscribe/")) opened.push(i);
          return workerFetch(i, init);
        },
        sleep: async () => {},
      });
      const got: Message[] = [];
      const sub = fg.subscribe(ch, (m) => got.push(m), { transport, onError: (e) => errors.push(e) });
      await until(async () => (await statsOf(ch)) === 1, "the subscription counted");
      for (let i = 1; i <= 2; i++) await publishTo(ch, pub, { i });
      await until(() => got.length === 2, "2 messages");
      await relayTick(ch, pair.expires_at * 1000);
      await until(() => refreshed.length === 1 && opened.length === 2, "the refresh and the second connection");
      expect(opened[1]).toContain("after=2");
      for (let i = 3; i <= 4; i++) await publishTo(ch, pub, { i });
      await until(() => got.length === 4, "4 messages");
      expect(got.map((m) => m.seq)).toEqual([1, 2, 3, 4]);
      expect(errors).toEqual([]);
      sub.close();
    });
  }

  for (const transport of ["websocket", "sse"] as const) {
    it(`${transport}: on a quiet channel, a message published while it renews is still delivered, once`, async () => {
      const ch = `public:client.${uniq()}`;
      const pub = (await mint({ sub: uniq(), channels: ["public:client.*"] })).access_token;
      for (let i = 1; i <= 2; i++) await publishTo(ch, pub, { before: i }); // the head it joins at: 2
      const pair = await mint({ sub: uniq("quiet"), channels: ["public:client.*"] });
      const ws = socketOpener();
      const errors: unknown[] = [];
      const opened: string[] = [];
      // The refresh waits until the test lets it go: the window between the close and the new
      // subscribe, in which the message is published.
      let refreshAsked = false;
      let letRefresh = () => {};
      const refreshGate = new Promise<void>((r) => {
        letRefresh = r;
      });
      const fg = new FloodgateClient({
        baseUrl: BASE,
        accessToken: pair.access_token,
        refreshToken: pair.refresh_token,
        openWebSocket: (url, protocols) => {
          opened.push(url);
          return ws.open(url, protocols);
        },
        fetch: async (i, init) => {
          if (i.includes("/v1/subscribe/")) opened.push(i);
          if (i.includes("/v1/tokens/refresh")) {
            refreshAsked = true;
            await refreshGate;
          }
          return workerFetch(i, init);
        },
        sleep: async () => {},
      });
      const got: Message[] = [];
      const sub = fg.subscribe(ch, (m) => got.push(m), { transport, onError: (e) => errors.push(e) });
      await until(async () => (await statsOf(ch)) === 1, "the subscription counted");
      expect(opened[0]).not.toContain("after=");
      await relayTick(ch, pair.expires_at * 1000);
      await until(() => refreshAsked, "the refresh after the expiry");
      await until(async () => (await statsOf(ch)) === 0, "away: nobody to send it to live");
      await publishTo(ch, pub, { away: true });
      letRefresh();
      await until(() => opened.length === 2, "the second connection");
      expect(opened[1]).toContain("after=2");
      await until(() => got.length === 1, "the message published while away");
      await publishTo(ch, pub, { back: true });
      await until(() => got.length === 2, "the next message");
      expect(got.map((m) => m.seq)).toEqual([3, 4]);
      expect(got.map((m) => m.data)).toEqual([{ away: true }, { back: true }]);
      expect(sub.lastSeq).toBe(4);
      expect(errors).toEqual([]);
      sub.close();
    });
  }
});

/** Subscribers of the channel, every relay together. */
async function statsOf(ch: string): Promise<number> {
  const res = await workerFetch(`${BASE}/v1/channels/${ch}/stats`, { headers: adminHeaders() });
  return ((await res.json()) as { occupancy: number }).occupancy;
}

describe("client connection state", () => {
  it("tells connecting → live → reconnecting → live → closed, and ready resolves once live", async () => {
    const ch = `public:client.${uniq()}`;
    const ws = socketOpener();
    const fg = new FloodgateClient({ baseUrl: BASE, openWebSocket: ws.open, sleep: async () => {} });
    const states: string[] = [];
    const sub = fg.subscribe(ch, () => {}, {
      onState: (state, change) => states.push(`${change.previous}→${state} (${change.transport})`),
    });
    expect(sub.state).toBe("connecting");
    await sub.ready;
    expect(sub.state).toBe("live");
    ws.sockets[0]?.close(1011, "network went away");
    await until(() => ws.sockets.length === 2 && sub.state === "live", "the reconnect");
    sub.close();
    expect(sub.state).toBe("closed");
    expect(states).toEqual([
      "connecting→live (websocket)",
      "live→reconnecting (websocket)",
      "reconnecting→live (websocket)",
      "live→closed (websocket)",
    ]);
  });

  it("ready rejects for a subscription closed before it was live; SSE is live on its 200", async () => {
    const fg = new FloodgateClient({ baseUrl: BASE, fetch: workerFetch, sleep: async () => {} });
    const early = fg.subscribe(`public:client.${uniq()}`, () => {}, { transport: "sse" });
    early.close();
    await expect(early.ready).rejects.toThrow(/closed before it was live/);
    const seen: ConnectionState[] = [];
    const sse = fg.subscribe(`public:client.${uniq()}`, () => {}, {
      transport: "sse",
      onState: (s) => seen.push(s),
    });
    await sse.ready;
    expect(sse.transport).toBe("sse");
    sse.close();
    expect(seen).toEqual(["live", "closed"]);
  });

  it("with no WebSocket in the runtime, auto starts on SSE without a failed open", async () => {
    const saved = globalThis.WebSocket;
    const errors: unknown[] = [];
    // As on Node 20 without --experimental-websocket.
    Object.defineProperty(globalThis, "WebSocket", { value: undefined, configurable: true, writable: true });
    try {
      const fg = new FloodgateClient({ baseUrl: BASE, fetch: workerFetch, sleep: async () => {} });
      const sub = fg.subscribe(`public:client.${uniq()}`, () => {}, { onError: (e) => errors.push(e) });
      expect(sub.transport).toBe("sse");
      await sub.ready;
      sub.close();
    } finally {
      Object.defineProperty(globalThis, "WebSocket", { value: saved, configurable: true, writable: true });
    }
    expect(errors).toEqual([]);
  });
});

describe("token helpers for a server-side admin context", () => {
  it("mints a pair with the admin token, refreshes it, and answers a wrong admin token with a typed 401", async () => {
    const admin = { baseUrl: BASE, adminToken: ADMIN, fetch: workerFetch };
    const pair = await mintTokens(admin, { sub: uniq(), channels: ["public:client.*"], ttl: "5m" });
    expect(pair).toMatchObject({ access_token: expect.any(String), refresh_token: expect.any(String) });
    const ch = `public:client.${uniq()}`;
    const fg = new FloodgateClient({ baseUrl: BASE, accessToken: pair.access_token, fetch: workerFetch });
    expect(await fg.publish(ch, { minted: true })).toMatchObject({ status: "delivered", seq: 1 });
    const next = await refreshTokens({ baseUrl: BASE, fetch: workerFetch }, pair.refresh_token);
    expect(next.refresh_token).not.toBe(pair.refresh_token);
    const wrong = await mintTokens(
      { ...admin, adminToken: "not-the-admin-token" },
      { sub: uniq(), channels: ["public:client.*"] },
    ).catch((e: unknown) => e);
    expect(wrong).toBeInstanceOf(FloodgateError);
    expect(wrong).toMatchObject({ status: 401, code: "unauthenticated" });
  });
});
