/**
 * Summaries of drops (docs/api.md, "Summaries of drops"), in workerd: real publishes dropped by the
 * throttle through two Worker isolates (two envs: each its own services, copy queue and batches),
 * real channel and relay objects, real sockets on several relays (RELAY_CAPACITY 2).
 *
 * `THROTTLE_SUMMARY` comes from test/vitest.config.ts (`public:summary.**` → `/emoji`,
 * `public:summary.deep.*` → `/a/b/0`) with `SUMMARY_INTERVAL` 1h, so no summary is sent by itself:
 * a test makes the open interval due now and runs the channel's alarm.
 */
import { createExecutionContext, runDurableObjectAlarm, runInDurableObject } from "cloudflare:test";
import { exports } from "cloudflare:workers";
import { type Summary as ClientSummary, FloodgateClient, type Message } from "@floodgate/client";
import { describe, expect, it } from "vitest";
import { OTHER_KEY } from "../../functions/drop-summary";
import worker from "../../src/index";
import { channelStub } from "../../src/platform/stubs";
import { makeSummaryDue } from "../support/channel-internals";
import { closeAndWaitTold } from "../support/closes-told";
import {
  adminHeaders,
  BASE,
  callAndWait,
  collectSse,
  env,
  envWith,
  freshIp,
  historyOf,
  mint,
  openSocket,
  publishAndWait,
  setRate,
  uniq,
  until,
  workerSocket,
} from "../support/helpers";

const relayEnv = envWith({ RELAY_CAPACITY: "2", SUBSCRIBE_BURST: "1000", READ_BURST: "1000" });
/** Two Worker isolates: each env gets its own services (copy queue, batches, rate cache). */
const isolateA = envWith({});
const isolateB = envWith({});

interface Summary {
  type: "summary";
  channel: string;
  from: number;
  to: number;
  dropped: number;
  by_key: Record<string, number>;
}

async function publisher(): Promise<string> {
  return (await mint({ sub: uniq("pub"), channels: ["public:summary.**"], rl: "100000/s" })).access_token;
}

/** Publishes each body through `isolate`, expecting `status` for each (202 dropped, 200 delivered). */
async function publishAll(ch: string, token: string, bodies: unknown[], isolate: Env, status: number, headers = {}) {
  for (const body of bodies) {
    const res = await publishAndWait(ch, token, body, headers, isolate);
    expect(res.status).toBe(status);
  }
}

/**
 * Ends the channel's open summary interval now (made due, as if `SUMMARY_INTERVAL` had passed) and
 * runs the alarm that sends the frame; answers whether an interval was open.
 */
async function endInterval(ch: string): Promise<boolean> {
  const open = await runInDurableObject(channelStub(env, ch), (instance) => makeSummaryDue(instance));
  if (open === null) return false;
  await runDurableObjectAlarm(channelStub(env, ch));
  return true;
}

interface Stats {
  dropped_total: number;
  relays: number;
  occupancy: number;
  last_summary: unknown;
}

async function stats(ch: string): Promise<Stats> {
  const res = await callAndWait(`/v1/channels/${ch}/stats`, { headers: adminHeaders() });
  return (await res.json()) as Stats;
}

const summariesIn = (frames: { type: string }[]) => frames.filter((f) => f.type === "summary") as unknown as Summary[];

describe("summaries of drops", () => {
  it("every subscriber on every relay gets one summary per interval whose counts per key add up to the drops of both isolates", async () => {
    const ch = `public:summary.${uniq()}`;
    const token = await publisher();
    const sockets = [
      await openSocket(ch, "", relayEnv),
      await openSocket(ch, "", relayEnv),
      await openSocket(ch, "?batch=1", relayEnv),
    ];
    const sseRes = await subscribeVia(`/v1/subscribe/${ch}`, { accept: "text/event-stream" });
    const reader = collectSse(sseRes);
    const sseText = rawSse(await subscribeVia(`/v1/subscribe/${ch}`, { accept: "text/event-stream" }));
    await until(async () => (await stats(ch)).relays >= 2, "subscribers on two relays");
    await setRate(ch, 1);

    const before = Date.now();
    // Isolate A: drops without a key (counted with their copies' batch), isolate B likewise, and one
    // with an Idempotency-Key (counted inside the channel's own batch).
    await publishAll(ch, token, [{ emoji: "🔥" }, { emoji: "🔥" }, { emoji: 3 }, { emoji: true }], isolateA, 202);
    await publishAll(ch, token, [{ emoji: "🔥" }, { emoji: "👏" }, { other: 1 }], isolateB, 202);
    await publishAll(ch, token, [{ emoji: "👏" }], isolateB, 202, { "idempotency-key": uniq("k") });
    const { dropped_total } = await stats(ch);
    expect(dropped_total).toBe(8);

    expect(await endInterval(ch)).toBe(true);
    const expected = { "🔥": 3, "👏": 2, "3": 1, true: 1, [OTHER_KEY]: 1 };
    for (const s of sockets) await until(() => summariesIn(s.frames.flat()).length === 1, "summary on a socket");
    await until(() => summariesIn(reader.frames).length === 1, "summary on SSE");
    for (const frames of [...sockets.map((s) => s.frames.flat()), reader.frames]) {
      const [summary] = summariesIn(frames);
      expect(summary).toMatchObject({ type: "summary", channel: ch, dropped: 8, by_key: expected });
      expect(summary?.from).toBeGreaterThanOrEqual(before);
      expect(summary?.to).toBeGreaterThan(summary?.from as number);
      const sum = Object.values(summary?.by_key ?? {}).reduce((a, b) => a + b, 0);
      expect(sum).toBe(dropped_total);
    }
    // A batched socket gets it packed in an array like its messages.
    expect(Array.isArray(sockets[2]?.frames[0])).toBe(true);
    // On SSE it is `event: summary` with no id.
    await until(() => sseText.text.includes("event: summary"), "raw SSE summary");
    const event = sseText.text.slice(sseText.text.indexOf("event: summary"));
    expect(event).toMatch(/^event: summary\ndata: \{"type":"summary".*\n\n/);
    expect(sseText.text).not.toMatch(/id: [^\n]*\nevent: summary/);

    // The channel's stats show it, and the dashboard's overview (from the sampler's registry) too.
    const sent = summariesIn(sockets[0]?.frames.flat() ?? [])[0];
    expect((await stats(ch)).last_summary).toEqual(sent);
    await until(async () => {
      const res = await callAndWait("/v1/admin/overview?within=1h", { headers: adminHeaders() });
      const body = (await res.json()) as { channels: { channel: string; last_summary: unknown }[] };
      const card = body.channels.find((c) => c.channel === ch);
      return (
        JSON.stringify(card?.last_summary) ===
        JSON.stringify({ from: sent?.from, to: sent?.to, dropped: 8, by_key: expected })
      );
    }, "the summary on the dashboard's overview");

    // The next interval starts empty and adds up on its own.
    await publishAll(ch, token, [{ emoji: "🔥" }, { emoji: "x" }], isolateA, 202);
    expect(await endInterval(ch)).toBe(true);
    await until(() => summariesIn(sockets[0]?.frames.flat() ?? []).length === 2, "second summary");
    expect(summariesIn(sockets[0]?.frames.flat() ?? [])[1]).toMatchObject({
      dropped: 2,
      by_key: { "🔥": 1, x: 1 },
    });
    await closeAndWaitTold(ch, async () => {
      for (const s of sockets) s.ws.close();
      await reader.close();
      await sseText.close();
    });
  });

  it("names the 20 largest keys and folds the rest, and values that are not scalars, into (other)", async () => {
    const ch = `public:summary.${uniq()}`;
    const token = await publisher();
    const sub = await openSocket(ch, "", relayEnv);
    await until(async () => (await stats(ch)).relays >= 1, "subscriber");
    await setRate(ch, 1);
    const bodies: unknown[] = [];
    // k00 once, k01 twice, … k24 25 times would be many publishes: 25 keys, the first 20 twice, the rest once.
    for (let i = 0; i < 25; i++) for (let j = 0; j < (i < 20 ? 2 : 1); j++) bodies.push({ emoji: `k${i}` });
    bodies.push({ emoji: { name: "fire" } }, { emoji: null }, { emoji: ["🔥"] }, [1, 2], "text", {
      emoji: "x".repeat(200),
    });
    // Through both isolates, interleaved.
    await publishAll(
      ch,
      token,
      bodies.filter((_, i) => i % 2 === 0),
      isolateA,
      202,
    );
    await publishAll(
      ch,
      token,
      bodies.filter((_, i) => i % 2 === 1),
      isolateB,
      202,
    );
    expect(await endInterval(ch)).toBe(true);
    await until(() => summariesIn(sub.frames).length === 1, "summary");
    const [summary] = summariesIn(sub.frames);
    const keys = Object.keys(summary?.by_key ?? {});
    expect(keys).toHaveLength(21);
    for (let i = 0; i < 20; i++) expect(summary?.by_key[`k${i}`]).toBe(2);
    // 5 keys past the top 20 (once each) and 6 values that are not a key.
    expect(summary?.by_key[OTHER_KEY]).toBe(11);
    expect(summary?.dropped).toBe(bodies.length);
    await closeAndWaitTold(ch, () => sub.ws.close());
  });

  it("the most specific rule picks the pointer", async () => {
    const ch = `public:summary.deep.${uniq()}`;
    const token = await publisher();
    const sub = await openSocket(ch, "", relayEnv);
    await until(async () => (await stats(ch)).relays >= 1, "subscriber");
    await setRate(ch, 1);
    await publishAll(ch, token, [{ a: { b: ["x"] } }, { a: { b: [7] } }, { emoji: "🔥" }], isolateA, 202);
    expect(await endInterval(ch)).toBe(true);
    await until(() => summariesIn(sub.frames).length === 1, "summary");
    expect(summariesIn(sub.frames)[0]?.by_key).toEqual({ x: 1, "7": 1, [OTHER_KEY]: 1 });
    await closeAndWaitTold(ch, () => sub.ws.close());
  });

  it("a value an object would take for its own (__proto__) is a key like any other: the counts add up", async () => {
    const ch = `public:summary.${uniq()}`;
    const token = await publisher();
    const sub = await openSocket(ch, "", relayEnv);
    await until(async () => (await stats(ch)).relays >= 1, "subscriber");
    await setRate(ch, 1);
    const bodies = [{ emoji: "__proto__" }, { emoji: "constructor" }, { emoji: "__proto__" }];
    await publishAll(ch, token, bodies, isolateA, 202);
    // Decided inside the channel's own batch too (with an Idempotency-Key).
    await publishAll(ch, token, [{ emoji: "__proto__" }], isolateB, 202, { "idempotency-key": uniq("k") });
    expect(await endInterval(ch)).toBe(true);
    await until(() => summariesIn(sub.frames).length === 1, "summary");
    const [summary] = summariesIn(sub.frames);
    expect(summary?.dropped).toBe(4);
    expect(Object.entries(summary?.by_key ?? {})).toEqual([
      ["__proto__", 3],
      ["constructor", 1],
    ]);
    await closeAndWaitTold(ch, () => sub.ws.close());
  });

  it("sends nothing for an interval without drops, and never puts a summary in history or a resume", async () => {
    const ch = `public:summary.${uniq()}`;
    const token = await publisher();
    const sub = await openSocket(ch, "", relayEnv);
    await until(async () => (await stats(ch)).relays >= 1, "subscriber");
    // Delivered only: no interval opens, and the alarm sends nothing.
    await publishAll(ch, token, [{ emoji: "🔥" }, { emoji: "👏" }], isolateA, 200);
    expect(await endInterval(ch)).toBe(false);
    await runDurableObjectAlarm(channelStub(env, ch));
    // Side frames ride the line in order: a summary sent before this message would arrive before it.
    await publishAll(ch, token, [{ emoji: "last" }], isolateA, 200);
    await until(() => sub.frames.length === 3, "three messages");
    expect(sub.frames.map((f) => f.type)).toEqual(["message", "message", "message"]);

    // Now drops: one summary; then an interval with no drops sends none.
    await setRate(ch, 1);
    await publishAll(ch, token, [{ emoji: "🔥" }], isolateB, 202);
    expect(await endInterval(ch)).toBe(true);
    await until(() => summariesIn(sub.frames).length === 1, "summary");
    expect(await endInterval(ch)).toBe(false);
    await setRate(ch, 0);
    await until(
      async () => (await publishAndWait(ch, token, { emoji: "after" }, {}, envWith({}))).status === 200,
      "delivered again",
    );
    await until(() => sub.frames.at(-1)?.type === "message" && sub.frames.length >= 5, "message after the summary");
    expect(summariesIn(sub.frames)).toHaveLength(1);

    // Never in history, never replayed on resume.
    const history = await historyOf(ch, null);
    expect(history.every((m) => m.type === "message")).toBe(true);
    const resumed = await openSocket(ch, "?after=0", relayEnv);
    await until(() => resumed.frames.length === history.length, "replay");
    expect(resumed.frames.every((f) => f.type === "message")).toBe(true);
    await closeAndWaitTold(ch, () => {
      sub.ws.close();
      resumed.ws.close();
    });
  });
});

describe("the client's summaries", () => {
  const workerFetch = (input: string, init?: RequestInit) => exports.default.fetch(new Request(input, init));
  const openWebSocket = workerSocket;

  it("hands summaries to onSummary over WebSocket and SSE, apart from messages, and publishes with priority", async () => {
    const ch = `public:summary.${uniq()}`;
    const pair = await mint({ sub: uniq("pub"), channels: ["public:summary.**"], scopes: ["publish", "priority"] });
    const fg = new FloodgateClient({
      baseUrl: BASE,
      accessToken: pair.access_token,
      fetch: workerFetch,
      openWebSocket,
    });
    const subs = (["websocket", "sse"] as const).map((transport) => {
      const messages: Message[] = [];
      const summaries: ClientSummary[] = [];
      const sub = fg.subscribe(ch, (m) => messages.push(m), { transport, onSummary: (x) => summaries.push(x) });
      return { sub, messages, summaries };
    });
    await until(async () => (await stats(ch)).relays >= 1 && (await stats(ch)).occupancy === 2, "two subscribers");
    await setRate(ch, 1);
    expect(await fg.publish(ch, { emoji: "🔥" })).toEqual({ status: "dropped" });
    expect(await fg.publish(ch, { emoji: "🏆" }, { priority: "high" })).toMatchObject({ status: "delivered", seq: 1 });
    expect(await endInterval(ch)).toBe(true);
    for (const s of subs) {
      await until(() => s.summaries.length === 1 && s.messages.length === 1, `summary on ${s.sub.transport}`);
      expect(s.summaries[0]).toMatchObject({ type: "summary", channel: ch, dropped: 1, by_key: { "🔥": 1 } });
      expect(s.messages.map((m) => m.data)).toEqual([{ emoji: "🏆" }]);
      expect(s.sub.lastSeq).toBe(1);
    }
    await closeAndWaitTold(ch, () => {
      for (const s of subs) s.sub.close();
    });
  });
});

describe("summary configuration", () => {
  const health = async (vars: Record<string, string>) => {
    const res = await callAndWait("/healthz", {}, envWith(vars));
    return { status: res.status, body: await res.text() };
  };

  it("a bad pointer, value, pattern or JSON in THROTTLE_SUMMARY fails closed, naming the variable", async () => {
    for (const bad of [
      '{"public:live.*":"emoji"}',
      '{"public:live.*":"/a~2"}',
      '{"public:live.*":3}',
      '{"public:live.*":null}',
      '{"live.*":"/emoji"}',
      '["/emoji"]',
      "{not json",
    ]) {
      const { status, body } = await health({ THROTTLE_SUMMARY: bad });
      expect(status, bad).toBe(500);
      expect(body, bad).toContain("THROTTLE_SUMMARY");
    }
    // And the publish route too: a typo never silently disables a rule.
    const ch = `public:summary.${uniq()}`;
    const token = await publisher();
    const res = await callAndWait(
      `/v1/publish/${ch}`,
      { method: "POST", headers: { authorization: `Bearer ${token}` }, body: "{}" },
      envWith({ THROTTLE_SUMMARY: '{"public:summary.*":"emoji"}' }),
    );
    expect(res.status).toBe(500);
    expect(await health({ THROTTLE_SUMMARY: '{"public:live.*":"","public:x.**":"/a~1b"}' })).toMatchObject({
      status: 200,
    });
  });

  it("the manifest shows the interval and the rules, most specific first", async () => {
    const res = await callAndWait("/v1/manifest", {}, envWith({ SUMMARY_INTERVAL: "1500ms" }));
    expect(((await res.json()) as { summaries: unknown }).summaries).toEqual({
      interval: "1.5s",
      rules: [
        { pattern: "public:summary.deep.*", pointer: "/a/b/0" },
        { pattern: "public:summary.**", pointer: "/emoji" },
        { pattern: "pusher:private-summary.**", pointer: "/data/emoji" },
        { pattern: "pusher:summary.**", pointer: "/data/emoji" },
      ],
    });
    const none = await callAndWait("/v1/manifest", {}, envWith({ THROTTLE_SUMMARY: "{}", SUMMARY_INTERVAL: "" }));
    expect(((await none.json()) as { summaries: unknown }).summaries).toEqual({ interval: "1s" });
  });

  it("SUMMARY_INTERVAL is a duration from 250ms to 1h", async () => {
    for (const bad of ["abc", "10ms", "0s", "2h", "5"]) {
      const { status, body } = await health({ SUMMARY_INTERVAL: bad });
      expect(status, bad).toBe(500);
      expect(body, bad).toContain("SUMMARY_INTERVAL");
    }
    for (const good of ["250ms", "1s", "2.5s", "1h", ""])
      expect((await health({ SUMMARY_INTERVAL: good })).status).toBe(200);
  });
});

/** A subscribe straight through the Worker with the small relays, from a fresh client IP. */
async function subscribeVia(path: string, headers: Record<string, string>): Promise<Response> {
  return worker.fetch(
    new Request(BASE + path, { headers: { "cf-connecting-ip": freshIp(), ...headers } }),
    relayEnv,
    createExecutionContext(),
  );
}

/** An SSE stream's raw text as it arrives. */
function rawSse(res: Response): { text: string; close: () => Promise<void> } {
  if (!res.body) throw new Error("no body");
  const reader = res.body.getReader();
  const decoder = new TextDecoder();
  const state = {
    text: "",
    close: async () => {
      await reader.cancel().catch(() => {});
    },
  };
  void (async () => {
    for (;;) {
      const { done, value } = await reader.read().catch(() => ({ done: true, value: undefined }));
      if (done) return;
      state.text += decoder.decode(value, { stream: true });
    }
  })();
  return state;
}
