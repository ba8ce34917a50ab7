/**
 * What the relay tests share (test/relay/fan-out.test.ts, test/relay/relay-counts.test.ts): a Worker with
 * RELAY_CAPACITY 10, stubs of a channel and its relays, stats, subscribers opened in order, and the
 * wait until a channel's relays have left and forgotten it; and for the lifetime tests
 * (subscription-lifetime, revoked-session-subscriptions), a WebSocket and an SSE stream that record
 * everything they get and how they end.
 */
import { createExecutionContext, runInDurableObject } from "cloudflare:test";
import type { ChannelStats } from "../../src/channel/calls";
import worker from "../../src/index";
import { channelStub as channelObject, relayStub as relayObject } from "../../src/platform/stubs";
import { relayName } from "../../src/relay/placement";
import {
  adminHeaders,
  BASE,
  call,
  callAndWait,
  collectSse,
  env,
  envWith,
  type Frame,
  freshIp,
  openSocket,
  until,
  untilUnsubscribed,
} from "./helpers";

export const CAPACITY = 10;
export const relayEnv = envWith({ RELAY_CAPACITY: String(CAPACITY) });

export const channelStub = (ch: string) => channelObject(env, ch);
/** Relay `k` of `ch` in the local group. */
export const relayStub = (ch: string, k: number) => relayObject(env, relayName(ch, "local", k));

/** What the relay tests read of `GET /v1/channels/{channel}/stats`: the object's counts and the view's target rate. */
export type Stats = Pick<
  ChannelStats,
  "occupancy" | "websockets" | "sse" | "relays" | "relay_sends_total" | "last_seq"
> & { target_rate: number | null };

export async function stats(ch: string): Promise<Stats> {
  return (await (await callAndWait(`/v1/channels/${ch}/stats`, { headers: adminHeaders() })).json()) as Stats;
}

/** `n` WebSocket subscribers of `ch`, opened one after another (so they fill relays in order). */
export async function openSockets(ch: string, n: number, customEnv: Env = relayEnv) {
  const subs: Awaited<ReturnType<typeof openSocket>>[] = [];
  for (let i = 0; i < n; i++) subs.push(await openSocket(ch, "", customEnv));
  return subs;
}

/** An SSE subscription through the relay-capacity Worker, collecting frames in the background. */
export async function openSse(ch: string, query = "", customEnv: Env = relayEnv) {
  const res = await worker.fetch(
    new Request(`${BASE}/v1/subscribe/${ch}${query}`, {
      headers: { accept: "text/event-stream", "cf-connecting-ip": freshIp() },
    }),
    customEnv,
    createExecutionContext(),
  );
  if (res.status !== 200) throw new Error(`SSE subscribe failed: ${res.status} ${await res.text()}`);
  return collectSse(res);
}

/**
 * Waits until every subscriber of `ch` is gone and its relays have left: the relays' reports and
 * storage deletions finish inside the test that caused them, not after the file ends.
 */
export async function settled(ch: string, relays = 12): Promise<void> {
  await untilUnsubscribed(ch);
  for (let k = 0; k < relays; k++) {
    await until(
      async () => (await runInDurableObject(relayStub(ch, k), (r) => r.counts())).last_seq === null,
      `relay ${k} to forget the channel`,
    );
  }
}

/** Resolves with the close event once the client side of `ws` sees the socket close. */
export function closed(ws: WebSocket): Promise<{ code: number; reason: string }> {
  return new Promise((resolve) => ws.addEventListener("close", (ev) => resolve({ code: ev.code, reason: ev.reason })));
}

export const seqs = (frames: Frame[]) => frames.map((f) => f.seq);
export const range = (from: number, to: number) => Array.from({ length: to - from + 1 }, (_, i) => from + i);

/**
 * A WebSocket subscription through the test Worker (with a token when given) that records its frames
 * (parsed), the texts that are not frames (the answer to `ping`) and its close.
 */
export async function socket(ch: string, token?: string, query = "") {
  const headers: Record<string, string> = { upgrade: "websocket" };
  if (token) headers.authorization = `Bearer ${token}`;
  const res = await call(`/v1/subscribe/${ch}${query}`, { headers });
  const ws = res.webSocket;
  if (res.status !== 101 || !ws) throw new Error(`subscribe failed: ${res.status}`);
  let close: { code: number; reason: string } | null = null;
  const frames: unknown[] = [];
  /** Texts that are not frames (the answer to `ping`). */
  const raw: string[] = [];
  ws.addEventListener("message", (ev) => {
    const text = ev.data as string;
    if (text === "pong") raw.push(text);
    else frames.push(JSON.parse(text));
  });
  ws.addEventListener("close", (ev) => {
    close = { code: ev.code, reason: ev.reason };
  });
  ws.accept();
  return { ws, frames, raw, closed: (): { code: number; reason: string } | null => close };
}

/** An SSE subscription through the test Worker whose raw text is collected (comments included) until it ends. */
export async function sseText(ch: string, token?: string) {
  const headers: Record<string, string> = { accept: "text/event-stream" };
  if (token) headers.authorization = `Bearer ${token}`;
  const res = await call(`/v1/subscribe/${ch}`, { headers });
  if (res.status !== 200 || !res.body) throw new Error(`subscribe failed: ${res.status}`);
  const reader = res.body.getReader();
  const decoder = new TextDecoder();
  const state = { text: "", ended: false };
  void (async () => {
    try {
      for (;;) {
        const { done, value } = await reader.read();
        if (done) break;
        state.text += decoder.decode(value, { stream: true });
      }
    } catch {
      // cancelled
    }
    state.ended = true;
  })();
  return { state, cancel: () => reader.cancel() };
}
