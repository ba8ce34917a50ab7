/**
 * One client's connections are bounded across channels (docs/api.md, "Relays"; docs/security.md):
 * a client — its token's `sub`, else its IP (IPv6 per /64) — holds at most MAX_CONNECTIONS_PER_CLIENT
 * open subscriptions over all channels; one more answers 429 `resource_exhausted`, bucket
 * `connections`, with Retry-After. Counted by the client's ledger (src/connection-ledger/) from its
 * relays' statements, told only when a count changes: a close counts out when its relay tells, a relay
 * that died without telling is asked again before its statement refuses anyone, a subscribe refused
 * further on gives its lease back. Real sockets in workerd through the Worker, budgets out of the way;
 * the ledger's clock is set by the test, nothing sleeps.
 */
import {
  createExecutionContext,
  runDurableObjectAlarm,
  runInDurableObject,
  waitOnExecutionContext,
} from "cloudflare:test";
import { describe, expect, it } from "vitest";
import { ChannelObject } from "../../src/channel/channel-object";
import { clientKey } from "../../src/channel/client-cap";
import { ASK_AFTER_MS, SWEEP_MS } from "../../src/connection-ledger/calls";
import worker from "../../src/index";
import { connectionHostStub } from "../../src/platform/stubs";
import { relayName } from "../../src/relay/placement";
import { ConfigError, parseConfig, rawConfigFrom } from "../../src/settings/settings";
import { closeAndWaitTold } from "../support/closes-told";
import { env, envWith, freshIp, mint, relayObject, uniq, until, withFailing } from "../support/helpers";
import { hostsWithConnections } from "../support/host-internals";
import { closePushers, openPusher } from "../support/pusher";

interface Who {
  token?: string;
  ip?: string;
}

async function subscribe(ch: string, mode: "ws" | "sse", who: Who, customEnv: Env): Promise<Response> {
  const headers: Record<string, string> = mode === "ws" ? { upgrade: "websocket" } : { accept: "text/event-stream" };
  headers["cf-connecting-ip"] = who.ip ?? freshIp();
  if (who.token) headers.authorization = `Bearer ${who.token}`;
  const ctx = createExecutionContext();
  const res = await worker.fetch(new Request(`${BASE}/v1/subscribe/${ch}`, { headers }), customEnv, ctx);
  await waitOnExecutionContext(ctx);
  return res;
}

const BASE = "https://floodgate.test";

interface Held {
  channel: string;
  end: () => Promise<void>;
}

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

/** Ends a test's last subscriptions and waits until their relays have told their channels and ledgers. */
function endAll(held: Held[]): Promise<void> {
  return closeAndWaitTold(
    held.map((h) => h.channel),
    async () => {
      for (const h of held) await h.end();
    },
  );
}

async function expectConnectionsRefusal(res: Response, max: number): Promise<void> {
  expect(res.status).toBe(429);
  expect(res.webSocket).toBeNull();
  expect(Number(res.headers.get("retry-after"))).toBeGreaterThanOrEqual(1);
  expect(res.headers.get("ratelimit-policy")).toBe(`"connections";q=${max}`);
  const body = (await res.json()) as { code: string; meta: Record<string, string> };
  expect(body).toMatchObject({ code: "resource_exhausted", meta: { code: "RATE_LIMITED", bucket: "connections" } });
  expect(Number(body.meta.retry_after_ms)).toBeGreaterThanOrEqual(1000);
}

function ledgerOf(client: string) {
  return env.CONNECTION_LEDGER.get(env.CONNECTION_LEDGER.idFromName(client));
}

/** What the client's ledger counts now. */
function held(client: string): Promise<number> {
  return runInDurableObject(ledgerOf(client), (l) => l.held());
}

/** A holder's last statement of the client in the client's ledger: what it holds, when it said so. */
function statement(client: string, holder: string): Promise<{ n: number; at: number } | undefined> {
  return runInDurableObject(ledgerOf(client), (l) =>
    (l as unknown as { holds: Map<string, { n: number; at: number }> }).holds.get(holder),
  );
}

/** What a holder last said it holds of the client (0: it has no statement). */
async function statementOf(client: string, holder: string): Promise<number> {
  return (await statement(client, holder))?.n ?? 0;
}

/** Moves the ledger's clock `ms` ahead of the real one. */
function age(client: string, ms: number): Promise<void> {
  return runInDurableObject(ledgerOf(client), (l) => {
    l.clock = () => Date.now() + ms;
  });
}

const three = envWith({ SUBSCRIBE_BURST: "1000", READ_BURST: "1000", MAX_CONNECTIONS_PER_CLIENT: "3" });

async function token(sub: string): Promise<string> {
  return (await mint({ sub, channels: ["public:conn.*"] })).access_token;
}

describe("MAX_CONNECTIONS_PER_CLIENT", () => {
  it("a subject's subscriptions count over all channels: the 4th of 3 answers 429 `connections`; another subject gets in; a close frees one", async () => {
    const sub = uniq("s");
    const t = await token(sub);
    const held3 = [
      await open(`public:conn.${uniq()}`, "ws", { token: t }, three),
      await open(`public:conn.${uniq()}`, "sse", { token: t }, three),
      await open(`public:conn.${uniq()}`, "ws", { token: t }, three),
    ];
    for (const mode of ["ws", "sse"] as const) {
      await expectConnectionsRefusal(await subscribe(`public:conn.${uniq()}`, mode, { token: t }, three), 3);
    }
    const other = await open(`public:conn.${uniq()}`, "ws", { token: await token(uniq("o")) }, three);
    // The relays have told the ledger: the leases joined, the statements stand.
    await until(async () => (await held(clientKey(sub, null))) === 3, "the relays' statements");
    await held3[0]?.end();
    await until(async () => (await held(clientKey(sub, null))) === 2, "the close to be told");
    held3[0] = await open(`public:conn.${uniq()}`, "sse", { token: t }, three);
    await expectConnectionsRefusal(await subscribe(`public:conn.${uniq()}`, "ws", { token: t }, three), 3);
    await endAll([...held3, other]);
  });

  it("without a token the client is its IP, an IPv6 address its /64", async () => {
    const ip = freshIp();
    const v4 = [];
    for (let i = 0; i < 3; i++) v4.push(await open(`public:conn.${uniq()}`, "ws", { ip }, three));
    await expectConnectionsRefusal(await subscribe(`public:conn.${uniq()}`, "sse", { ip }, three), 3);
    const net = `2001:db8:${Math.floor(Math.random() * 0xffff).toString(16)}:1`;
    const v6 = [];
    for (let i = 1; i <= 3; i++) v6.push(await open(`public:conn.${uniq()}`, "ws", { ip: `${net}::${i}` }, three));
    await expectConnectionsRefusal(await subscribe(`public:conn.${uniq()}`, "ws", { ip: `${net}:ffff::9` }, three), 3);
    await endAll([...v4, ...v6]);
  });

  it("a subscribe refused further on (the channel's own cap) gives its lease back at once", async () => {
    const capped = envWith({
      SUBSCRIBE_BURST: "1000",
      MAX_CONNECTIONS_PER_CLIENT: "2",
      MAX_SUBSCRIPTIONS_PER_CLIENT: "1",
    });
    const t = await token(uniq("r"));
    const ch = `public:conn.${uniq()}`;
    const first = await open(ch, "ws", { token: t }, capped);
    for (let i = 0; i < 3; i++) expect((await subscribe(ch, "ws", { token: t }, capped)).status).toBe(429);
    // Three refusals took no connection: the second channel still gets in.
    const second = await open(`public:conn.${uniq()}`, "ws", { token: t }, capped);
    await endAll([first, second]);
  });

  it("a subscribe its channel failed to answer (503) gives its lease back at once", async () => {
    const two = envWith({ SUBSCRIBE_BURST: "1000", MAX_CONNECTIONS_PER_CLIENT: "2" });
    const t = await token(uniq("f"));
    const first = await open(`public:conn.${uniq()}`, "ws", { token: t }, two);
    const failing = `public:conn.${uniq()}`;
    for (let i = 0; i < 3; i++) {
      const res = await withFailing(ChannelObject, "assignRelay", "SQLITE_BUSY: backend detail", () =>
        subscribe(failing, "ws", { token: t }, two),
      );
      expect(res.status).toBe(503);
      expect(res.headers.get("floodgate-refusal")).toBe("unavailable");
    }
    // Three failures took no connection: a working channel still gets in.
    const second = await open(`public:conn.${uniq()}`, "ws", { token: t }, two);
    await endAll([first, second]);
  });

  it("a relay holding subscribers tells its ledgers only of changes: no alarm is set for them", async () => {
    const ip = freshIp();
    const ch = `public:conn.${uniq()}`;
    const held2 = [await open(ch, "ws", { ip }, three), await open(ch, "ws", { ip }, three)];
    const client = clientKey(null, ip);
    await until(async () => (await held(client)) === 2, "the relay's statement");
    // Anonymous WebSocket subscribers: no token expires, no heartbeat is due; the relay may hibernate.
    const alarm = await runInDurableObject(relayObject(ch), (_relay, state) => state.storage.getAlarm());
    expect(alarm).toBeNull();
    await endAll(held2);
    await until(async () => (await held(client)) === 0, "the closes to be told");
  });

  it("a relay back from hibernation tells no ledger again: a close after waking tells its own client only", async () => {
    const [a, b] = [freshIp(), freshIp()];
    const ch = `public:conn.${uniq()}`;
    const relay = relayName(ch, "local", 0);
    const held2 = [await open(ch, "ws", { ip: a }, three), await open(ch, "ws", { ip: a }, three)];
    const other = await open(ch, "ws", { ip: b }, three);
    const [ca, cb] = [clientKey(null, a), clientKey(null, b)];
    await until(async () => (await statementOf(ca, relay)) === 2 && (await statementOf(cb, relay)) === 1, "both told");
    const before = await statement(ca, relay);
    // Woken as a fresh instance is: nothing remembered of what it told, its sockets restored.
    await runInDurableObject(relayObject(ch), (r) => {
      const holds = (r as unknown as { holds: { reset(): void; restored(): void } }).holds;
      holds.reset();
      holds.restored();
    });
    await other.end();
    await until(async () => (await statementOf(cb, relay)) === 0, "the close to be told");
    expect(await statement(ca, relay)).toEqual(before);
    await endAll(held2);
    await until(async () => (await held(ca)) === 0, "the closes to be told");
  });

  it("a holder that died without telling stops counting when it would refuse: its stale statement is asked again", async () => {
    const sub = uniq("d");
    const t = await token(sub);
    const client = clientKey(sub, null);
    const ch = `public:conn.${uniq()}`;
    const live = relayName(ch, "local", 0);
    const held2 = [await open(ch, "ws", { token: t }, three), await open(ch, "sse", { token: t }, three)];
    await until(async () => (await statementOf(client, live)) === 2, "the relay's statement");
    // A relay of another channel said it held one of the client's, then went with its sockets untold.
    const dead = relayName(`public:conn.${uniq()}`, "local", 0);
    await runInDurableObject(ledgerOf(client), (l) => l.hold(client, dead, 1, []));
    // Fresh, the statement stands: the client is at its cap of 3.
    await expectConnectionsRefusal(await subscribe(`public:conn.${uniq()}`, "ws", { token: t }, three), 3);
    // Older than ASK_AFTER_MS (no renewal meanwhile), the refusal asks its holders first: the dead one
    // holds nothing, the live one its 2; the subscribe gets in.
    await age(client, ASK_AFTER_MS + 1_000);
    const third = await open(`public:conn.${uniq()}`, "ws", { token: t }, three);
    expect(await statementOf(client, dead)).toBe(0);
    expect(await statementOf(client, live)).toBe(2);
    // Really at 3 now: refused, and the holders just asked are not asked again.
    await until(async () => (await held(client)) === 3, "the join to be told");
    await expectConnectionsRefusal(await subscribe(`public:conn.${uniq()}`, "sse", { token: t }, three), 3);
    await endAll([...held2, third]);
    await until(async () => (await held(client)) === 0, "the closes to be told");
  });

  it("a connection host asked again answers what it holds of the client from its sockets", async () => {
    await openPusher(undefined, three);
    await until(async () => (await hostsWithConnections()).length > 0, "the connection's host in its directory");
    const [host] = (await hostsWithConnections()) as [string];
    const counts = await runInDurableObject(connectionHostStub(env, host), (h) =>
      (h as unknown as { connections: { clientCounts(): [string, number][] } }).connections.clientCounts(),
    );
    const client = counts[0]?.[0] ?? "";
    await until(async () => (await statementOf(client, host)) === 1, "the host's statement");
    // Say the host restarted and found fewer sockets than it last told (3, the cap), without telling.
    await runInDurableObject(ledgerOf(client), (l) => l.hold(client, host, 3, []));
    expect(await ledgerOf(client).acquire(3, client)).toEqual({ full: true });
    await age(client, ASK_AFTER_MS + 1_000);
    const answer = await ledgerOf(client).acquire(3, client);
    expect(answer).toHaveProperty("lease");
    expect(await statementOf(client, host)).toBe(1);
    if ("lease" in answer) await ledgerOf(client).release(answer.lease);
    await closePushers();
    await until(async () => (await held(client)) === 0, "the close to be told");
  });

  it("a ledger with statements sweeps hourly: a holder that went is forgotten, and nothing is kept", async () => {
    const client = clientKey(uniq("w"), null);
    const dead = relayName(`public:conn.${uniq()}`, "local", 0);
    await runInDurableObject(ledgerOf(client), (l) => l.hold(client, dead, 2, []));
    const at = await runInDurableObject(ledgerOf(client), (_l, state) => state.storage.getAlarm());
    expect(at).toBeGreaterThan(Date.now() + SWEEP_MS - 60_000);
    await age(client, SWEEP_MS + 1_000);
    expect(await runDurableObjectAlarm(ledgerOf(client))).toBe(true);
    expect(await held(client)).toBe(0);
    const kept = await runInDurableObject(ledgerOf(client), async (_l, state) => ({
      alarm: await state.storage.getAlarm(),
      tables: state.storage.sql.exec("SELECT name FROM sqlite_master WHERE type = 'table'").toArray().length,
    }));
    expect(kept).toEqual({ alarm: null, tables: 0 });
  });

  it("defaults to 100; a value that is not a positive integer fails closed naming the variable", () => {
    const { MAX_CONNECTIONS_PER_CLIENT: shipped, ...rest } = rawConfigFrom(env);
    expect(shipped).toBe("100");
    expect(parseConfig(rest).maxConnectionsPerClient).toBe(100);
    for (const bad of ["0", "-1", "2.5", "many"]) {
      expect(() => parseConfig({ ...rest, MAX_CONNECTIONS_PER_CLIENT: bad })).toThrow(ConfigError);
      expect(() => parseConfig({ ...rest, MAX_CONNECTIONS_PER_CLIENT: bad })).toThrow(/MAX_CONNECTIONS_PER_CLIENT/);
    }
  });
});
