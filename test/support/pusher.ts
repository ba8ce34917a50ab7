/**
 * A raw Pusher connection for the tests that run in workerd (test/connection-host/, test/worker/pusher/):
 * where a library would hide what must be checked (error events, close codes, exact frames). The
 * libraries themselves (pusher-js, pusher, laravel-echo) are driven over real sockets by the tests in
 * test/pusher-libraries/, which run in Node.
 */
import { createExecutionContext } from "cloudflare:test";
import { env } from "cloudflare:workers";
import { expect } from "vitest";
import worker from "../../src/index";
import { channelAuth } from "../../src/wire/pusher/signatures";
import { BASE, call, callAndWait, freshIp, mint, uniq, untilUnsubscribed } from "./helpers";

/** Every connection a test opened, and the channels it subscribed to (see {@link closePushers}). */
const opened = new Set<WebSocket>();
const subscribedTo = new Set<string>();

/**
 * Closes every connection the test opened and waits until their channels have no subscriber left,
 * so no host's count report is still in flight when the file's environment is torn down (vitest
 * fails the run on an RPC cut off midway). Each file's `afterEach`.
 */
export async function closePushers(): Promise<void> {
  for (const ws of opened) {
    try {
      ws.close();
    } catch {
      // closed already
    }
  }
  opened.clear();
  const channels = [...subscribedTo].map((n) => `pusher:${n}`);
  subscribedTo.clear();
  await untilUnsubscribed(...channels);
}

/** The test configuration's app (test/vitest.config.ts). */
export const APP = { id: "test-app", key: "test-key", secret: "test-pusher-secret-0123" };

export interface PusherEvent {
  event: string;
  channel?: string;
  data?: unknown;
  user_id?: string;
}

export interface PusherSocket {
  ws: WebSocket;
  socketId: string;
  events: PusherEvent[];
  /** Resolves once an event matching `match` (after the first `from` events) has arrived. */
  next(match: (e: PusherEvent) => boolean, from?: number): Promise<PusherEvent>;
  send(frame: unknown): void;
  closed: Promise<{ code: number; reason: string }>;
  /**
   * Waits until the host has read everything sent before: a ping it answers itself (pusher-js's exact
   * ping text is answered by the runtime at once, ahead of frames still being read, so not that one).
   */
  barrier(): Promise<void>;
  /** Subscribes and waits for `pusher_internal:subscription_succeeded` or `pusher:subscription_error`. */
  subscribe(channel: string, extra?: { auth?: string; channel_data?: string }): Promise<PusherEvent>;
}

/**
 * Opens a Pusher connection through the Worker (its own client IP: tests must not share a read budget),
 * with `headers` besides (a browser's `Origin`, say).
 */
export async function openPusher(
  path = `/app/${APP.key}?protocol=7&client=js&version=8.6.0`,
  customEnv?: Env,
  headers: Record<string, string> = {},
): Promise<PusherSocket> {
  const init = { headers: { upgrade: "websocket", "cf-connecting-ip": freshIp(), ...headers } };
  // Through a Worker with another configuration (RELAY_CAPACITY, say) when `customEnv` is given.
  const res = customEnv
    ? await worker.fetch(new Request(BASE + path, init), customEnv, createExecutionContext())
    : await call(path, init);
  if (res.status !== 101 || !res.webSocket) throw new Error(`connect failed: ${res.status} ${await res.text()}`);
  const ws = res.webSocket;
  opened.add(ws);
  const events: PusherEvent[] = [];
  const waiters: { match: (e: PusherEvent) => boolean; from: number; resolve: (e: PusherEvent) => void }[] = [];
  let closed!: (v: { code: number; reason: string }) => void;
  const closedP = new Promise<{ code: number; reason: string }>((r) => {
    closed = r;
  });
  ws.accept();
  ws.addEventListener("message", (ev) => {
    const e = JSON.parse(ev.data as string) as PusherEvent;
    events.push(e);
    for (const w of [...waiters]) {
      const i = events.findIndex((x, n) => n >= w.from && w.match(x));
      if (i >= 0) {
        waiters.splice(waiters.indexOf(w), 1);
        w.resolve(events[i] as PusherEvent);
      }
    }
  });
  ws.addEventListener("close", (ev) => closed({ code: ev.code, reason: ev.reason }));
  const next = (match: (e: PusherEvent) => boolean, from = 0) =>
    new Promise<PusherEvent>((resolve, reject) => {
      const found = events.find((x, n) => n >= from && match(x));
      if (found) return resolve(found);
      waiters.push({ match, from, resolve });
      setTimeout(() => reject(new Error(`timed out; events so far: ${JSON.stringify(events).slice(0, 2000)}`)), 15_000);
    });
  const established = await next((e) => e.event === "pusher:connection_established" || e.event === "pusher:error");
  const socketId =
    established.event === "pusher:connection_established"
      ? (JSON.parse(established.data as string) as { socket_id: string }).socket_id
      : "";
  const send = (frame: unknown) => ws.send(JSON.stringify(frame));
  return {
    ws,
    socketId,
    events,
    next,
    send,
    closed: closedP,
    barrier: async () => {
      const from = events.length;
      ws.send('{"event":"pusher:ping","data":"{}"}');
      await next((e) => e.event === "pusher:pong", from);
    },
    subscribe: (channel, extra = {}) => {
      subscribedTo.add(channel);
      const from = events.length;
      send({ event: "pusher:subscribe", data: { channel, ...extra } });
      return next(
        (e) =>
          e.channel === channel &&
          (e.event === "pusher_internal:subscription_succeeded" || e.event === "pusher:subscription_error"),
        from,
      );
    },
  };
}

/** The `auth` (and for presence `channel_data`) an app's backend would give this socket for `channel`. */
export async function authFor(
  socket: { socketId: string },
  channel: string,
  member?: { user_id: string; user_info?: unknown },
): Promise<{ auth: string; channel_data?: string }> {
  const channelData = member ? JSON.stringify(member) : null;
  const auth = await channelAuth(APP, socket.socketId, channel, channelData);
  return channelData === null ? { auth } : { auth, channel_data: channelData };
}

/** The data of an event as pusher-js would read it (JSON text parsed). */
export function dataOf(e: PusherEvent): unknown {
  return typeof e.data === "string" ? JSON.parse(e.data) : e.data;
}

export { env };

/** A token that may publish to every Pusher channel (`pusher:**`). */
export async function pusherPublisher(): Promise<string> {
  return (await mint({ sub: uniq("pub"), channels: ["pusher:**"], scopes: ["publish"] })).access_token;
}

/** Publishes event `n` on the Pusher channel `name` (native publish, awaited): its data is `n`, then `pad`. */
export async function publishEvent(name: string, token: string, n: number, pad = "", customEnv: Env = env) {
  const res = await callAndWait(
    `/v1/publish/pusher:${name}`,
    {
      method: "POST",
      headers: { authorization: `Bearer ${token}`, "content-type": "application/json" },
      body: JSON.stringify({ event: "n", data: `${n}${pad}` }),
    },
    customEnv,
  );
  expect(res.status, `publish ${n}`).toBe(200);
}

/** The numbers of the events `p` got on `name` from {@link publishEvent}, in the order it got them. */
export function numbers(p: PusherSocket, name: string): number[] {
  return p.events.filter((e) => e.channel === name && e.event === "n").map((e) => Number.parseInt(String(e.data), 10));
}

/** Waits until `p` got event `n` on `name`. */
export async function got(p: PusherSocket, name: string, n: number): Promise<void> {
  await p.next((e) => e.channel === name && e.event === "n" && Number.parseInt(String(e.data), 10) === n);
}

/** Hex MD5 and HMAC-SHA256 with WebCrypto, as the Pusher server libraries compute them. */
async function hex(buffer: ArrayBuffer): Promise<string> {
  return [...new Uint8Array(buffer)].map((b) => b.toString(16).padStart(2, "0")).join("");
}

/**
 * A Pusher HTTP API request signed as the `pusher` library signs it (its own tests run in Node,
 * test/pusher-libraries/); `over` changes what is signed with (another secret, key or time).
 */
export async function signedApiCall(
  method: "GET" | "POST",
  path: string,
  params: Record<string, string> = {},
  body?: unknown,
  over: {
    secret?: string;
    key?: string;
    timestamp?: number;
    tamper?: (q: URLSearchParams) => void;
    /** Through a Worker with another configuration (a small publish budget, say), its background work awaited. */
    env?: Env;
  } = {},
): Promise<Response> {
  const text = body === undefined ? undefined : typeof body === "string" ? body : JSON.stringify(body);
  const q: Record<string, string> = {
    auth_key: over.key ?? APP.key,
    auth_timestamp: String(over.timestamp ?? Math.floor(Date.now() / 1000)),
    auth_version: "1.0",
    ...params,
  };
  if (text !== undefined) q.body_md5 = await hex(await crypto.subtle.digest("MD5", new TextEncoder().encode(text)));
  const sorted = Object.keys(q)
    .sort()
    .map((k) => `${k}=${q[k]}`)
    .join("&");
  const key = await crypto.subtle.importKey(
    "raw",
    new TextEncoder().encode(over.secret ?? APP.secret),
    { name: "HMAC", hash: "SHA-256" },
    false,
    ["sign"],
  );
  const signature = await hex(
    await crypto.subtle.sign("HMAC", key, new TextEncoder().encode(`${method}\n${path}\n${sorted}`)),
  );
  const search = new URLSearchParams({ ...q, auth_signature: signature });
  over.tamper?.(search);
  const init: RequestInit = {
    method,
    ...(text !== undefined
      ? { body: text, headers: { "content-type": "application/json", "cf-connecting-ip": freshIp() } }
      : {}),
  };
  return over.env ? callAndWait(`${path}?${search}`, init, over.env) : call(`${path}?${search}`, init);
}
