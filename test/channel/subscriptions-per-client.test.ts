/**
 * One client cannot take a channel (docs/api.md, "Relays"; docs/security.md): at most
 * MAX_SUBSCRIPTIONS_PER_CLIENT open subscriptions per channel per client — the token's `sub`, else
 * the client IP (IPv6 per /64) — counted by the channel from its relays' reports, so a close (a
 * WebSocket close, an SSE reader gone) frees a slot, even when the report of it is first lost, and a
 * channel that restarts still knows what each client holds. Real sockets in workerd, through a Worker
 * whose subscribe and read budgets are large enough that only the cap can refuse; time is the relay's
 * own `now` (its `tick`), nothing sleeps.
 */
import { createExecutionContext, evictDurableObject, runInDurableObject } from "cloudflare:test";
import { describe, expect, it } from "vitest";
import type { ChannelStats } from "../../src/channel/calls";
import { ChannelObject } from "../../src/channel/channel-object";
import worker from "../../src/index";
import { REPORT_RETRY_MS } from "../../src/relay/bounds";
import { ConfigError, parseConfig, rawConfigFrom } from "../../src/settings/settings";
import { closeAndWaitTold } from "../support/closes-told";
import {
  adminHeaders,
  BASE,
  callAndWait,
  channelObject as channelStub,
  env,
  envWith,
  freshIp,
  mint,
  relayObject as relayStub,
  uniq,
  until,
  withFailing,
} from "../support/helpers";

/** Budgets out of the way: the 21st subscribe must meet the cap, not `subscribe:<sub>`'s burst of 20. */
const roomy = envWith({ SUBSCRIBE_BURST: "1000", READ_BURST: "1000" });
/** The same with a cap of 2, for the tests about who counts as one client. */
const capTwo = envWith({ SUBSCRIBE_BURST: "1000", READ_BURST: "1000", MAX_SUBSCRIPTIONS_PER_CLIENT: "2" });

interface Who {
  token?: string;
  ip?: string;
}

/** A subscribe through `customEnv`'s Worker; the response as it comes (101, 200 or a refusal). */
async function subscribe(ch: string, mode: "ws" | "sse", who: Who, customEnv: Env): Promise<Response> {
  const headers: Record<string, string> = mode === "ws" ? { upgrade: "websocket" } : { accept: "text/event-stream" };
  headers["cf-connecting-ip"] = who.ip ?? freshIp();
  if (who.token) headers.authorization = `Bearer ${who.token}`;
  return worker.fetch(new Request(`${BASE}/v1/subscribe/${ch}`, { headers }), customEnv, createExecutionContext());
}

/** An open subscription: its socket or stream, and how to end it from the client's side. */
async function open(ch: string, mode: "ws" | "sse", who: Who, customEnv: Env): Promise<Held> {
  const res = await subscribe(ch, mode, who, customEnv);
  if (mode === "ws") {
    const ws = res.webSocket;
    if (res.status !== 101 || !ws) throw new Error(`subscribe failed: ${res.status} ${await res.text()}`);
    ws.accept();
    return { channel: ch, end: async () => ws.close(1000, "done") };
  }
  if (res.status !== 200 || !res.body) throw new Error(`subscribe failed: ${res.status} ${await res.text()}`);
  const reader = res.body.getReader();
  void reader.read().catch(() => {});
  return { channel: ch, end: () => reader.cancel() };
}

interface Held {
  channel: string;
  end: () => Promise<void>;
}

/** Ends a test's last subscriptions and waits until their relays have told their channels and ledgers. */
function endAll(held: Held[]): Promise<void> {
  return closeAndWaitTold(
    held.map((h) => h.channel),
    async () => {
      for (const h of held) await h.end();
    },
  );
}

async function stats(ch: string): Promise<ChannelStats> {
  return (await (await callAndWait(`/v1/channels/${ch}/stats`, { headers: adminHeaders() })).json()) as ChannelStats;
}

/** The refusal of the cap: 429 resource_exhausted, bucket `subscriptions`, with Retry-After, no upgrade. */
async function expectCapped(res: Response): Promise<void> {
  expect(res.status).toBe(429);
  expect(res.webSocket).toBeNull();
  expect(Number(res.headers.get("retry-after"))).toBeGreaterThanOrEqual(1);
  const body = (await res.json()) as { code: string; meta: Record<string, string> };
  expect(body).toMatchObject({ code: "resource_exhausted", meta: { code: "RATE_LIMITED", bucket: "subscriptions" } });
  expect(Number(body.meta.retry_after_ms)).toBeGreaterThanOrEqual(1000);
}

async function token(sub: string): Promise<string> {
  return (await mint({ sub, channels: ["public:cap.*"] })).access_token;
}

describe("MAX_SUBSCRIPTIONS_PER_CLIENT", () => {
  it("the 21st subscription of one subject to one channel answers 429 `subscriptions`; another subject, or another channel, is let in; a close frees a slot", async () => {
    const ch = `public:cap.${uniq()}`;
    const a = await token(uniq("a"));
    const held = [];
    // From many addresses: the subject is the client, wherever it connects from.
    for (let i = 0; i < 15; i++) held.push(await open(ch, "ws", { token: a }, roomy));
    for (let i = 0; i < 5; i++) held.push(await open(ch, "sse", { token: a }, roomy));
    await expectCapped(await subscribe(ch, "ws", { token: a }, roomy));
    await expectCapped(await subscribe(ch, "sse", { token: a }, roomy));
    const b = await open(ch, "ws", { token: await token(uniq("b")) }, roomy);
    const elsewhere = await open(`public:cap.${uniq()}`, "ws", { token: a }, roomy);
    expect(await stats(ch)).toMatchObject({ websockets: 16, sse: 5 });
    // A WebSocket closed by its client: the relay reports it, and the slot is free again.
    await held[0]?.end();
    await until(async () => (await stats(ch)).websockets === 15, "the close to be counted");
    held[0] = await open(ch, "ws", { token: a }, roomy);
    await expectCapped(await subscribe(ch, "ws", { token: a }, roomy));
    await endAll([...held, b, elsewhere]);
  });

  it("without a token the client is its IP, an IPv6 address its /64; an aborted SSE stream frees a slot", async () => {
    const ch = `public:cap.${uniq()}`;
    const ip = freshIp();
    const v4 = [await open(ch, "ws", { ip }, capTwo), await open(ch, "sse", { ip }, capTwo)];
    await expectCapped(await subscribe(ch, "ws", { ip }, capTwo));
    const other = await open(ch, "ws", { ip: freshIp() }, capTwo);
    // Two addresses of one /64 are one client; the next /64 is another.
    const net = `2001:db8:${Math.floor(Math.random() * 0xffff).toString(16)}`;
    const v6 = [
      await open(ch, "ws", { ip: `${net}:1:0:0:0:1` }, capTwo),
      await open(ch, "sse", { ip: `${net}:1:ffff:1234:5678:9` }, capTwo),
    ];
    await expectCapped(await subscribe(ch, "ws", { ip: `${net}:1::abcd` }, capTwo));
    const nextNet = await open(ch, "ws", { ip: `${net}:2::1` }, capTwo);
    // The IPv4 client's SSE reader goes away: its slot is free once the relay has reported it.
    const before = (await stats(ch)).sse;
    await v4[1]?.end();
    await until(async () => (await stats(ch)).sse === before - 1, "the aborted stream to stop counting");
    v4[1] = await open(ch, "ws", { ip }, capTwo);
    await expectCapped(await subscribe(ch, "sse", { ip }, capTwo));
    await endAll([...v4, other, ...v6, nextNet]);
  });

  it("a close whose report is lost still frees the slot: the relay's alarm repeats the report", async () => {
    const ch = `public:cap.${uniq()}`;
    const t = await token(uniq("lost"));
    const held = [await open(ch, "ws", { token: t }, capTwo), await open(ch, "sse", { token: t }, capTwo)];
    await expectCapped(await subscribe(ch, "ws", { token: t }, capTwo));
    const stub = relayStub(ch);
    await withFailing(ChannelObject, "relayReport", "channel unavailable", async () => {
      await held[1]?.end();
      await until(
        () =>
          runInDurableObject(
            stub,
            (relay) =>
              relay.counts().sse === 0 &&
              (relay as unknown as { reporter: { reporting: unknown } }).reporter.reporting === null,
          ),
        "the relay's failed report",
      );
    });
    // The channel did not hear of it: the client is still at its cap.
    await expectCapped(await subscribe(ch, "ws", { token: t }, capTwo));
    await runInDurableObject(stub, (relay) => relay.tick(Date.now() + REPORT_RETRY_MS));
    await until(async () => (await stats(ch)).sse === 0, "the repeated report");
    held[1] = await open(ch, "ws", { token: t }, capTwo);
    await endAll(held);
  });

  it("a client's subscriptions count over all the channel's relays together", async () => {
    const ch = `public:cap.${uniq()}`;
    const small = envWith({ SUBSCRIBE_BURST: "1000", MAX_SUBSCRIPTIONS_PER_CLIENT: "3", RELAY_CAPACITY: "2" });
    const t = await token(uniq("spread"));
    const held = [];
    for (let i = 0; i < 3; i++) held.push(await open(ch, "ws", { token: t }, small));
    expect(await stats(ch)).toMatchObject({ websockets: 3, relays: 2 });
    await expectCapped(await subscribe(ch, "ws", { token: t }, small));
    await endAll(held);
  });

  it("a channel that restarts still knows what each client holds", async () => {
    const ch = `public:cap.${uniq()}`;
    const t = await token(uniq("restart"));
    const held = [await open(ch, "ws", { token: t }, capTwo), await open(ch, "ws", { token: t }, capTwo)];
    await evictDurableObject(channelStub(ch));
    await expectCapped(await subscribe(ch, "ws", { token: t }, capTwo));
    await held[0]?.end();
    await until(async () => (await stats(ch)).websockets === 1, "the close to be counted");
    held[0] = await open(ch, "ws", { token: t }, capTwo);
    await endAll(held);
  });

  it("defaults to 20; a value that is not a positive integer fails closed naming the variable", () => {
    const { MAX_SUBSCRIPTIONS_PER_CLIENT: shipped, ...rest } = rawConfigFrom(env);
    expect(shipped).toBe("20");
    expect(parseConfig(rest).maxSubscriptionsPerClient).toBe(20);
    expect(parseConfig({ ...rest, MAX_SUBSCRIPTIONS_PER_CLIENT: "3" }).maxSubscriptionsPerClient).toBe(3);
    for (const bad of ["0", "-1", "2.5", "abc"]) {
      expect(() => parseConfig({ ...rest, MAX_SUBSCRIPTIONS_PER_CLIENT: bad })).toThrow(ConfigError);
      expect(() => parseConfig({ ...rest, MAX_SUBSCRIPTIONS_PER_CLIENT: bad })).toThrow(/MAX_SUBSCRIPTIONS_PER_CLIENT/);
    }
  });
});
