/**
 * Anonymous crowds cannot lock token holders out (docs/api.md, "Relays"; docs/security.md): past
 * ANONYMOUS_SHARE × MAX_SUBSCRIBERS anonymous subscribers of a public channel an anonymous subscribe
 * answers 503 with Retry-After while token holders still get in up to MAX_SUBSCRIBERS, and anonymous
 * clients of one IPv6 /48 hold at most 10 × MAX_SUBSCRIPTIONS_PER_CLIENT of a channel (429, bucket
 * `subscriptions`). Real sockets in workerd through the Worker; budgets out of the way.
 */
import { createExecutionContext } from "cloudflare:test";
import { describe, expect, it } from "vitest";
import type { ChannelStats } from "../../src/channel/calls";
import worker from "../../src/index";
import { ConfigError, parseConfig, rawConfigFrom } from "../../src/settings/settings";
import { closeAndWaitTold } from "../support/closes-told";
import { adminHeaders, BASE, callAndWait, env, envWith, freshIp, mint, uniq, until } from "../support/helpers";

interface Who {
  token?: string;
  ip?: string;
}

async function subscribe(ch: string, mode: "ws" | "sse", who: Who, customEnv: Env): Promise<Response> {
  const headers: Record<string, string> = mode === "ws" ? { upgrade: "websocket" } : { accept: "text/event-stream" };
  headers["cf-connecting-ip"] = who.ip ?? freshIp();
  if (who.token) headers.authorization = `Bearer ${who.token}`;
  return worker.fetch(new Request(`${BASE}/v1/subscribe/${ch}`, { headers }), customEnv, createExecutionContext());
}

async function open(ch: string, mode: "ws" | "sse", who: Who, customEnv: Env): Promise<{ end: () => Promise<void> }> {
  const res = await subscribe(ch, mode, who, customEnv);
  if (mode === "ws") {
    const ws = res.webSocket;
    if (res.status !== 101 || !ws) throw new Error(`subscribe failed: ${res.status} ${await res.text()}`);
    ws.accept();
    return { end: async () => ws.close(1000, "done") };
  }
  if (res.status !== 200 || !res.body) throw new Error(`subscribe failed: ${res.status} ${await res.text()}`);
  const reader = res.body.getReader();
  void reader.read().catch(() => {});
  return { end: () => reader.cancel() };
}

/** Ends a test's last subscriptions of `ch` and waits until their relays have told the channel and the ledgers. */
function endAll(ch: string, held: { end: () => Promise<void> }[]): Promise<void> {
  return closeAndWaitTold(ch, async () => {
    for (const h of held) await h.end();
  });
}

async function stats(ch: string): Promise<ChannelStats> {
  return (await (await callAndWait(`/v1/channels/${ch}/stats`, { headers: adminHeaders() })).json()) as ChannelStats;
}

async function token(sub: string, pattern: string): Promise<string> {
  return (await mint({ sub, channels: [pattern] })).access_token;
}

/** A /48 of the documentation range nobody else in this file uses. */
function freshNet(): string {
  return `2001:db8:${Math.floor(Math.random() * 0xffff).toString(16)}`;
}

describe("ANONYMOUS_SHARE", () => {
  it("past the share an anonymous subscribe answers 503 with Retry-After; token holders get in up to MAX_SUBSCRIBERS; a close lets one anonymous in again", async () => {
    const ch = `public:anon.${uniq()}`;
    const small = envWith({ SUBSCRIBE_BURST: "1000", READ_BURST: "1000", MAX_SUBSCRIBERS: "6" });
    // Three anonymous clients (IPs), WebSocket and SSE: half of 6.
    const anon = [await open(ch, "ws", {}, small), await open(ch, "sse", {}, small), await open(ch, "ws", {}, small)];
    for (const mode of ["ws", "sse"] as const) {
      const res = await subscribe(ch, mode, {}, small);
      expect(res.status).toBe(503);
      expect(res.webSocket).toBeNull();
      expect(Number(res.headers.get("retry-after"))).toBeGreaterThanOrEqual(1);
      expect(await res.json()).toMatchObject({ code: "unavailable", meta: { code: "UNAVAILABLE" } });
    }
    // A token that does not verify is anonymous too.
    expect((await subscribe(ch, "ws", { token: "not.a.token" }, small)).status).toBe(503);
    // Token holders are not anonymous: three more get in, to MAX_SUBSCRIBERS.
    const holders = [];
    for (let i = 0; i < 3; i++)
      holders.push(await open(ch, "ws", { token: await token(uniq("h"), "public:anon.*") }, small));
    const over = await subscribe(ch, "ws", { token: await token(uniq("h"), "public:anon.*") }, small);
    expect(over.status).toBe(503);
    expect(await stats(ch)).toMatchObject({ websockets: 5, sse: 1 });
    // An anonymous one leaves, a token holder leaves: one anonymous gets in again, and no more.
    await anon[0]?.end();
    await holders[0]?.end();
    await until(async () => (await stats(ch)).websockets === 3, "the closes to be counted");
    anon[0] = await open(ch, "ws", {}, small);
    expect((await subscribe(ch, "sse", {}, small)).status).toBe(503);
    await endAll(ch, [...anon, ...holders]);
  });

  it("a private channel has no anonymous share: its token holders fill MAX_SUBSCRIBERS", async () => {
    const ch = `private:anon.${uniq()}.x`;
    const small = envWith({ SUBSCRIBE_BURST: "1000", MAX_SUBSCRIBERS: "2", ANONYMOUS_SHARE: "0" });
    const t = await token(uniq("p"), "private:anon.*.*");
    const held = [await open(ch, "ws", { token: t }, small), await open(ch, "ws", { token: t }, small)];
    expect((await subscribe(ch, "ws", { token: t }, small)).status).toBe(503);
    await endAll(ch, held);
  });

  it("anonymous clients of one IPv6 /48 hold at most 10 × MAX_SUBSCRIPTIONS_PER_CLIENT: 429 `subscriptions`; another /48, a token, get in", async () => {
    const ch = `public:anon.${uniq()}`;
    const capOne = envWith({ SUBSCRIBE_BURST: "1000", READ_BURST: "1000", MAX_SUBSCRIPTIONS_PER_CLIENT: "1" });
    const net = freshNet();
    const held = [];
    // Ten /64s of one /48, one subscription each (each /64 is a client at its own cap of 1).
    for (let i = 1; i <= 10; i++)
      held.push(await open(ch, i % 2 ? "ws" : "sse", { ip: `${net}:${i.toString(16)}::1` }, capOne));
    const res = await subscribe(ch, "ws", { ip: `${net}:ff::1` }, capOne);
    expect(res.status).toBe(429);
    expect(res.webSocket).toBeNull();
    expect(Number(res.headers.get("retry-after"))).toBeGreaterThanOrEqual(1);
    expect(await res.json()).toMatchObject({
      code: "resource_exhausted",
      meta: { code: "RATE_LIMITED", bucket: "subscriptions" },
    });
    held.push(await open(ch, "ws", { ip: `${freshNet()}:1::1` }, capOne));
    held.push(await open(ch, "ws", { ip: `${net}:ff::2`, token: await token(uniq("t"), "public:anon.*") }, capOne));
    // One of the /48's closes: the next /64 of it gets in.
    await held[0]?.end();
    await until(async () => (await stats(ch)).websockets + (await stats(ch)).sse === 11, "the close to be counted");
    held[0] = await open(ch, "ws", { ip: `${net}:ff::1` }, capOne);
    await endAll(ch, held);
  });

  it("defaults to 0.5; a value that is not a fraction from 0 to 1 fails closed naming the variable", () => {
    const { ANONYMOUS_SHARE: shipped, ...rest } = rawConfigFrom(env);
    expect(shipped).toBe("0.5");
    expect(parseConfig(rest).anonymousShare).toBe(0.5);
    expect(parseConfig({ ...rest, ANONYMOUS_SHARE: "1" }).anonymousShare).toBe(1);
    expect(parseConfig({ ...rest, ANONYMOUS_SHARE: "0.25" }).anonymousShare).toBe(0.25);
    for (const bad of ["1.5", "-0.1", "half", "50%"]) {
      expect(() => parseConfig({ ...rest, ANONYMOUS_SHARE: bad })).toThrow(ConfigError);
      expect(() => parseConfig({ ...rest, ANONYMOUS_SHARE: bad })).toThrow(/ANONYMOUS_SHARE/);
    }
  });

  it("the manifest shows the audience's bounds as configured", async () => {
    const custom = envWith({ ANONYMOUS_SHARE: "0.25", MAX_CONNECTIONS_PER_CLIENT: "7", MAX_SUBSCRIBERS: "300" });
    const res = await worker.fetch(new Request(`${BASE}/v1/manifest`), custom, createExecutionContext());
    const body = (await res.json()) as { audience: Record<string, number> };
    expect(body.audience).toEqual({
      max_subscribers: 300,
      relay_capacity: Number(rawConfigFrom(env).RELAY_CAPACITY),
      max_subscriptions_per_client: Number(rawConfigFrom(env).MAX_SUBSCRIPTIONS_PER_CLIENT),
      anonymous_share: 0.25,
      max_connections_per_client: 7,
    });
  });
});
