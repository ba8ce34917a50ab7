/**
 * Shared test helpers: call the Worker, mint tokens through the real API, read SSE streams.
 */

import { env, exports } from "cloudflare:workers";
import type { Message, SocketLike, TokenPair } from "@floodgate/client";
import { readSse as readSseEvents } from "@floodgate/client";
import type { BatchChargeResult, LeaseRequest } from "../../src/limiter/bucket-charge";
import type { BucketBackend } from "../../src/limiter/limiter-gate";
import { shardOf, shardStub } from "../../src/limiter/limiter-shard";
import type { Limit } from "../../src/settings/limits";

export const ADMIN = "test-admin-token";
export const BASE = "https://floodgate.test";

/**
 * Time allowed to a test that makes hundreds of requests one after another (a drop-rate share, the
 * delivered-or-recorded run): what it checks is what arrives, not how fast, and on a busy 2-core
 * machine (`npm run test:stress`, CI) it takes three to four times as long as on an idle one.
 */
export const SLOW_TEST_MS = 90_000;

let ipCounter = 0;
/** A fresh client IP per call, so token-issue budgets never leak between tests. */
export function freshIp(): string {
  ipCounter++;
  return `10.${(ipCounter >> 16) & 255}.${(ipCounter >> 8) & 255}.${ipCounter & 255}`;
}

/** A unique channel component, since storage is shared by the tests of one file. */
export function uniq(prefix = "t"): string {
  return `${prefix}${crypto.randomUUID().replace(/-/g, "").slice(0, 12)}`;
}

/** Fetch through the deployed Worker entry (the same module the tests import). */
export function call(path: string, init: RequestInit = {}): Promise<Response> {
  return exports.default.fetch(new Request(BASE + path, init));
}

export function adminHeaders(extra: Record<string, string> = {}): Record<string, string> {
  return { authorization: `Bearer ${ADMIN}`, "content-type": "application/json", ...extra };
}

/** A token pair as `POST /v1/tokens` answers it: the client's type. */
export type Pair = TokenPair;

/** Mints a token pair through `POST /v1/tokens`. */
export async function mint(body: Record<string, unknown>): Promise<Pair> {
  const res = await call("/v1/tokens", {
    method: "POST",
    headers: adminHeaders({ "cf-connecting-ip": freshIp() }),
    body: JSON.stringify(body),
  });
  if (res.status !== 201) throw new Error(`mint failed: ${res.status} ${await res.text()}`);
  return (await res.json()) as Pair;
}

export async function publishTo(
  channel: string,
  token: string,
  data: unknown,
  headers: Record<string, string> = {},
): Promise<Response> {
  return call(`/v1/publish/${channel}`, {
    method: "POST",
    headers: { authorization: `Bearer ${token}`, "content-type": "application/json", ...headers },
    body: JSON.stringify(data),
  });
}

export async function setRate(channel: string, rate: number): Promise<void> {
  const res = await call(`/v1/admin/throttle/${channel}`, {
    method: "PUT",
    headers: adminHeaders(),
    body: JSON.stringify({ rate }),
  });
  if (res.status !== 200) throw new Error(`set rate failed: ${res.status} ${await res.text()}`);
}

/** A message frame as subscribers and history get it: the client's type. */
export type Frame = Message;

/**
 * Opens a WebSocket subscription through the Worker and collects frames; with `customEnv`, through a
 * Worker with that configuration (RELAY_CAPACITY, say).
 */
export async function openSocket(
  channel: string,
  query = "",
  customEnv?: Env,
): Promise<{ ws: WebSocket; frames: Frame[]; next: (n: number) => Promise<Frame[]> }> {
  const path = `/v1/subscribe/${channel}${query}`;
  // Through a custom Worker, each from its own client IP: many subscribers must not share one read budget.
  const res = customEnv
    ? await worker.fetch(
        new Request(BASE + path, { headers: { upgrade: "websocket", "cf-connecting-ip": freshIp() } }),
        customEnv,
        createExecutionContext(),
      )
    : await call(path, { headers: { upgrade: "websocket" } });
  if (res.status !== 101 || !res.webSocket) throw new Error(`subscribe failed: ${res.status} ${await res.text()}`);
  const ws = res.webSocket;
  const frames: Frame[] = [];
  const waiters: { n: number; resolve: (f: Frame[]) => void }[] = [];
  ws.accept();
  ws.addEventListener("message", (ev) => {
    frames.push(JSON.parse(ev.data as string) as Frame);
    for (const w of [...waiters]) {
      if (frames.length >= w.n) {
        waiters.splice(waiters.indexOf(w), 1);
        w.resolve(frames.slice());
      }
    }
  });
  const next = (n: number) =>
    new Promise<Frame[]>((resolve, reject) => {
      if (frames.length >= n) return resolve(frames.slice());
      waiters.push({ n, resolve });
      // Frames already sent arrive within a few event-loop turns; the bound is for a loaded machine.
      setTimeout(() => reject(new Error(`timed out waiting for ${n} frames, have ${frames.length}`)), 15_000);
    });
  return { ws, frames, next };
}

/** The seq of an SSE event id, `<epoch>:<seq>` (docs/api.md, "Numbering restarts"). */
export function seqOf(id: string | undefined): number {
  const m = /^[A-Za-z0-9_-]{1,64}:(\d+)$/.exec(id ?? "");
  return m ? Number(m[1]) : Number.NaN;
}

/**
 * Reads SSE message events (those with an id) from a response body until `n` have arrived or the
 * stream ends, then cancels it. Parsed by the client's reader (packages/client, `readSse`).
 */
export async function readSse(res: Response, n: number): Promise<{ id: string; data: Frame }[]> {
  if (!res.body) throw new Error("no body");
  const events: { id: string; data: Frame }[] = [];
  if (n <= 0) {
    await res.body.cancel();
    return events;
  }
  await readSseEvents(res.body, ({ id, data }) => {
    if (id !== undefined) events.push({ id, data: JSON.parse(data) as Frame });
    return events.length < n;
  });
  return events;
}

export { env };

import {
  createExecutionContext,
  createScheduledController,
  runInDurableObject,
  waitOnExecutionContext,
} from "cloudflare:test";
import type { ChannelStats } from "../../src/channel/calls";
import worker from "../../src/index";
import { relayName } from "../../src/relay/placement";

/**
 * Calls the Worker's fetch handler with its own execution context and waits for its `waitUntil`
 * work (analytics copies, metric flushes) before returning. `customEnv` swaps in a different config.
 */
export async function callAndWait(path: string, init: RequestInit = {}, customEnv: Env = env): Promise<Response> {
  const ctx = createExecutionContext();
  const res = await worker.fetch(new Request(BASE + path, init), customEnv, ctx);
  await waitOnExecutionContext(ctx);
  return res;
}

/**
 * One run of the sampler's cron, through the Worker's real `scheduled` handler (with `customEnv`, a
 * different configuration), and the background work it started.
 */
export async function cron(customEnv: Env = env): Promise<void> {
  const ctx = createExecutionContext();
  await worker.scheduled(createScheduledController({ scheduledTime: Date.now(), cron: "* * * * *" }), customEnv, ctx);
  await waitOnExecutionContext(ctx);
}

/**
 * An access token (fresh subject) that may publish to `channels`, under a rate limit high enough that
 * no test's publishes are refused for rate.
 */
export async function publisher(channels: string | string[], rl = "100000/s"): Promise<string> {
  const patterns = typeof channels === "string" ? [channels] : channels;
  return (await mint({ sub: uniq("pub"), channels: patterns, rl })).access_token;
}

/** Publishes and waits for the background work the publish started. */
export function publishAndWait(
  channel: string,
  token: string,
  data: unknown,
  headers: Record<string, string> = {},
  customEnv: Env = env,
): Promise<Response> {
  return callAndWait(
    `/v1/publish/${channel}`,
    {
      method: "POST",
      headers: { authorization: `Bearer ${token}`, "content-type": "application/json", ...headers },
      body: JSON.stringify(data),
    },
    customEnv,
  );
}

/** An env with some variables replaced (fresh object, so the Worker parses its config anew). */
export function envWith(vars: Record<string, unknown>): Env {
  return { ...env, ...vars } as Env;
}

/**
 * A channel's history page. Each read comes from a fresh client IP: tests poll history until a copy
 * lands, and the read budget (`read:<ip>`, tested on its own) must not turn their polling into 429s.
 */
export async function historyOf(channel: string, token: string | null, query = ""): Promise<Frame[]> {
  const headers: Record<string, string> = { "cf-connecting-ip": freshIp() };
  if (token) headers.authorization = `Bearer ${token}`;
  const res = await call(`/v1/history/${channel}${query}`, { headers });
  if (res.status !== 200) throw new Error(`history failed: ${res.status} ${await res.text()}`);
  return ((await res.json()) as { messages: Frame[] }).messages;
}

/**
 * Fault injection inside workerd: while `run` runs, `method` of a Durable Object class (its
 * prototype, which RPC calls reach) throws `message`; afterwards the real method is back. With
 * `when`, only the calls it picks fail (e.g. one channel's object, by the instance or by the call's
 * arguments when a new object does not know its name yet); the rest run normally.
 */
export async function withFailing<T>(
  cls: { prototype: object },
  method: string,
  message: string,
  run: () => Promise<T>,
  when: (instance: Record<string, unknown>, args: unknown[]) => boolean = () => true,
): Promise<T> {
  const proto = cls.prototype as Record<string, unknown>;
  const original = proto[method] as (...args: unknown[]) => unknown;
  proto[method] = function (this: Record<string, unknown>, ...args: unknown[]) {
    if (when(this, args)) throw new Error(message);
    return original.apply(this, args);
  };
  try {
    return await run();
  } finally {
    proto[method] = original;
  }
}

/** What the limiter stores for `key` (in the key's shard), or null when its bucket is full. */
export function peekBucket(key: string): Promise<{ tokens: number; updatedAt: number } | null> {
  return shardStub(env, key).peek(key);
}

/**
 * A LimiterGate backend from a per-key fake: every entry of a shard call is answered by `charge`
 * alone, one after another, in order; a throw fails the whole call.
 */
export function perKey(
  charge: (key: string, limit: Limit, count: number, lease: LeaseRequest) => Promise<BatchChargeResult>,
): BucketBackend {
  return {
    async charge(_shard, charges) {
      const out: BatchChargeResult[] = [];
      for (const c of charges) out.push(await charge(c.key, c.limit, c.count, c.lease ?? { want: 0, settle: [] }));
      return out;
    },
  };
}

/** Every table a Durable Object has, with its row count: empty means it stores nothing. */
export async function storedTables(stub: DurableObjectStub): Promise<Record<string, number>> {
  return runInDurableObject(stub, (_i, state) => {
    const out: Record<string, number> = {};
    const tables = state.storage.sql
      .exec<{ name: string }>(
        "SELECT name FROM sqlite_master WHERE type = 'table' AND name NOT LIKE '\\_%' ESCAPE '\\'",
      )
      .toArray();
    for (const { name } of tables) {
      out[name] = state.storage.sql.exec<{ n: number }>(`SELECT COUNT(*) AS n FROM "${name}"`).one().n;
    }
    return out;
  });
}

/** `n` fresh keys that all hash to one limiter shard. */
export function keysInOneShard(n: number, prefix = "publish:"): string[] {
  const keys: string[] = [];
  const shard = shardOf(`${prefix}${uniq()}`);
  while (keys.length < n) {
    const k = `${prefix}${uniq()}`;
    if (shardOf(k) === shard) keys.push(k);
  }
  return keys;
}

/**
 * Collects every event of an SSE response in the background (the client's parser): `ended()` once the
 * stream closed (its relay ended it), `close()` cancels it and waits for the reader.
 */
export function collectSse(res: Response): { frames: Frame[]; ended: () => boolean; close: () => Promise<void> } {
  if (!res.body) throw new Error("no body");
  const frames: Frame[] = [];
  const stopped = new AbortController();
  let ended = false;
  const pump = readSseEvents(res.body, ({ data }) => void frames.push(JSON.parse(data) as Frame), stopped.signal)
    .catch(() => {})
    .finally(() => {
      ended = true;
    });
  return {
    frames,
    ended: () => ended,
    close: async () => {
      stopped.abort();
      await pump;
    },
  };
}

/**
 * Polls (no fixed sleep) until `ready()` holds, bounded in time rather than in turns: on a loaded
 * machine a turn takes longer than its few milliseconds.
 */
export async function until(ready: () => boolean | Promise<boolean>, what: string, ms = 15_000): Promise<void> {
  const end = Date.now() + ms;
  while (!(await ready())) {
    if (Date.now() > end) throw new Error(`timed out waiting for ${what}`);
    await new Promise((r) => setTimeout(r, 5));
  }
}

/**
 * The client's `openWebSocket` through the Worker itself, each socket from its own client IP (so
 * many of them never share one read budget or per-client cap).
 */
export async function workerSocket(url: string, protocols: string[]): Promise<SocketLike> {
  const res = await exports.default.fetch(
    new Request(url.replace(/^ws/, "http"), {
      headers: { upgrade: "websocket", "sec-websocket-protocol": protocols.join(", "), "cf-connecting-ip": freshIp() },
    }),
  );
  if (res.status !== 101 || !res.webSocket) throw new Error(`upgrade failed: ${res.status}`);
  res.webSocket.accept();
  return res.webSocket as unknown as SocketLike;
}

/**
 * Waits until each channel has heard from its relays that every subscriber is gone and no relay is
 * left. A test that closes its subscribers last awaits this, so no relay's count report is still in
 * flight when the file's environment is torn down (vitest fails the run on an RPC cut off midway).
 */
export async function untilUnsubscribed(...channels: string[]): Promise<void> {
  for (const channel of channels) {
    await until(async () => {
      const res = await callAndWait(`/v1/channels/${channel}/stats`, { headers: adminHeaders() });
      const stats = (await res.json()) as { websockets: number; sse: number; relays: number };
      return stats.websockets === 0 && stats.sse === 0 && stats.relays === 0;
    }, `${channel} without subscribers`);
  }
}

/** A channel's object (by its name, or a shard's key), reached as the Worker reaches it. */
export function channelObject(channel: string) {
  return env.CHANNEL.get(env.CHANNEL.idFromName(channel));
}

/** The `k`-th relay of a channel (locally there is no colo: every relay is in the group `local`). */
export function relayObject(channel: string, k = 0) {
  return env.RELAY.get(env.RELAY.idFromName(relayName(channel, "local", k)));
}

/** `GET /v1/channels/{channel}/stats`, with the admin bearer. */
export async function channelStats(channel: string): Promise<ChannelStats> {
  const res = await callAndWait(`/v1/channels/${channel}/stats`, { headers: adminHeaders() });
  return (await res.json()) as ChannelStats;
}

/** The series of a `/metrics` scrape, by key (`floodgate_refusals_total{reason="read"}`). */
export async function scrapeMetrics(customEnv: Env = env): Promise<Record<string, number>> {
  // From an address of its own: a test that exhausts an admin-auth budget must not refuse the scrape.
  const res = await callAndWait("/metrics", { headers: adminHeaders({ "cf-connecting-ip": freshIp() }) }, customEnv);
  if (res.status !== 200) throw new Error(`scrape failed: ${res.status}`);
  const text = await res.text();
  const out: Record<string, number> = {};
  for (const line of text.split("\n")) {
    if (line === "" || line.startsWith("#")) continue;
    const at = line.lastIndexOf(" ");
    out[line.slice(0, at)] = Number(line.slice(at + 1));
  }
  return out;
}

/** How much each series grew between two scrapes (only those that did). */
export function grown(before: Record<string, number>, after: Record<string, number>): Record<string, number> {
  const out: Record<string, number> = {};
  for (const [k, v] of Object.entries(after)) if (v !== (before[k] ?? 0)) out[k] = v - (before[k] ?? 0);
  return out;
}

/** The `floodgate_refusals_total` reasons that grew between two scrapes, with how much. */
export function refusalsGrown(before: Record<string, number>, after: Record<string, number>): Record<string, number> {
  return Object.fromEntries(
    Object.entries(grown(before, after)).filter(([k]) => k.startsWith("floodgate_refusals_total")),
  );
}
