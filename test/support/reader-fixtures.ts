/**
 * What the tests of each reader's rate share (test/relay/reader-*.test.ts): a relay whose clock the
 * test moves (the relay's own `clock`, so buckets, summaries and thinning steps run on test time, not
 * on sleeps), publishes straight into the channel's object, and subscribers that keep messages and
 * subscriber summaries apart (WebSocket, packed or not, and SSE with each event's name and id).
 */
import { createExecutionContext, runInDurableObject } from "cloudflare:test";
import { readSse } from "@floodgate/client";
import worker from "../../src/index";
import type { SubscriberSummaryFrame } from "../../src/wire/frames";
import { BASE, channelObject, env, type Frame, freshIp, relayObject } from "./helpers";

/** A relay's clock in the test's hands: `at` is what the relay reads as now (epoch ms). */
export interface RelayClock {
  at: number;
  /** The relay's timer pass (held messages, summaries, thinning, count reports) at `at`. */
  tick(): Promise<void>;
}

/**
 * Gives relay `k` of `ch` a clock the test moves, starting now. Before the first subscriber too: the
 * relay's instance is made by this call and kept (nothing evicts it in a test).
 */
export async function relayClock(ch: string, k = 0): Promise<RelayClock> {
  const clock: RelayClock = {
    at: Date.now(),
    tick: () => runInDurableObject(relayObject(ch, k), (r) => r.tick(clock.at)),
  };
  await runInDurableObject(relayObject(ch, k), (r) => {
    r.clock = () => clock.at;
  });
  return clock;
}

/** One publish straight into the channel's object (no budget, no throttle): its seq. */
export async function publishDirect(ch: string, data: unknown, priority = false): Promise<number> {
  const { outcomes } = await channelObject(ch).publishMany([
    { channel: ch, data: JSON.stringify(data), publisher: "p", action: "deliver", now: Date.now(), priority },
  ]);
  const o = outcomes[0];
  if (o?.status !== "delivered") throw new Error("not delivered");
  return o.seq;
}

/** What a subscriber got: messages, subscriber summaries, other side frames, how its frames came. */
export interface Received {
  messages: Frame[];
  summaries: SubscriberSummaryFrame[];
  /** Text frames (WebSocket) or events (SSE) as they came, for checks of their form. */
  raw: { event?: string; id?: string; text: string }[];
  closed: () => { code: number; reason: string } | null;
}

function sort(into: Received, f: { type?: string; scope?: string }): void {
  if (f.type === "message") into.messages.push(f as Frame);
  else if (f.type === "summary" && f.scope === "subscriber") into.summaries.push(f as SubscriberSummaryFrame);
}

async function subscribe(ch: string, query: string, headers: Record<string, string>): Promise<Response> {
  return worker.fetch(
    new Request(`${BASE}/v1/subscribe/${ch}${query}`, { headers: { "cf-connecting-ip": freshIp(), ...headers } }),
    env,
    createExecutionContext(),
  );
}

/** A WebSocket subscriber (`query` as given: `?max_rate=5/s&batch=1`, …); `accept: false` leaves it unread. */
export async function readerSocket(ch: string, query = "", accept = true): Promise<Received & { ws: WebSocket }> {
  const res = await subscribe(ch, query, { upgrade: "websocket" });
  const ws = res.webSocket;
  if (res.status !== 101 || !ws) throw new Error(`subscribe failed: ${res.status} ${await res.text()}`);
  let close: { code: number; reason: string } | null = null;
  const got: Received & { ws: WebSocket } = { ws, messages: [], summaries: [], raw: [], closed: () => close };
  ws.addEventListener("message", (ev) => {
    const text = ev.data as string;
    got.raw.push({ text });
    const parsed = JSON.parse(text) as { type?: string } | { type?: string }[];
    for (const f of Array.isArray(parsed) ? parsed : [parsed]) sort(got, f);
  });
  ws.addEventListener("close", (ev) => {
    close = { code: ev.code, reason: ev.reason };
  });
  if (accept) ws.accept();
  return got;
}

/** An SSE subscriber, keeping each event's name and id. */
export async function readerSse(ch: string, query = ""): Promise<Received & { cancel: () => Promise<void> }> {
  const res = await subscribe(ch, query, { accept: "text/event-stream" });
  if (res.status !== 200 || !res.body) throw new Error(`subscribe failed: ${res.status}`);
  let ended = false;
  const stop = new AbortController();
  const got: Received & { cancel: () => Promise<void> } = {
    messages: [],
    summaries: [],
    raw: [],
    closed: () => (ended ? { code: 0, reason: "ended" } : null),
    cancel: async () => {
      stop.abort();
      await pump;
    },
  };
  const pump = readSse(
    res.body,
    (e) => {
      got.raw.push({ event: e.event, id: e.id, text: e.data });
      sort(got, JSON.parse(e.data) as { type?: string });
    },
    stop.signal,
  )
    .catch(() => {})
    .finally(() => {
      ended = true;
    });
  return got;
}

/** Messages and skips a subscriber's summaries account for. */
export function accounted(r: Received): number {
  return r.messages.length + r.summaries.reduce((n, s) => n + s.skipped, 0);
}

export type { SubscriberSummaryFrame };
