/**
 * Side frames (docs/api.md, "Side frames"): frames outside the message order — summaries, presence —
 * that the channel sends through its relays. A summary reaches every live subscriber: an unbatched
 * WebSocket as its own text frame after the call's messages, a batched one packed with them (also
 * when `FRAME_DELAY` holds them), an SSE reader as `event: summary` with no `id`; a presence frame
 * reaches only subscribers that take presence (none here); none enters history. Real sockets in
 * workerd, the channel's own line to its relays (a test hands it the frames).
 */
import { createExecutionContext, runInDurableObject } from "cloudflare:test";
import { describe, expect, it } from "vitest";
import worker from "../../src/index";
import { channelStub } from "../../src/platform/stubs";
import type { Relay } from "../../src/relay/relay";
import type { SideFrame } from "../../src/wire/frame-text";
import { sendSide } from "../support/channel-internals";
import { closeAndWaitTold } from "../support/closes-told";
import {
  BASE,
  envWith,
  freshIp,
  historyOf,
  mint,
  publishTo,
  relayObject as relayStub,
  uniq,
  until,
} from "../support/helpers";

const CAPACITY = 2;
const relayEnv = envWith({ RELAY_CAPACITY: String(CAPACITY), SUBSCRIBE_BURST: "1000", READ_BURST: "1000" });

const summary = (ch: string, n: number): SideFrame => ({
  event: "summary",
  text: `{"type":"summary","channel":${JSON.stringify(ch)},"from":0,"to":1000,"dropped":${n},"by_key":{"(other)":${n}}}`,
});
const presence = (ch: string): SideFrame => ({
  event: "presence",
  text: `{"type":"presence","channel":${JSON.stringify(ch)},"action":"interval","occupancy":3,"joined":1,"left":0}`,
});

async function subscribe(ch: string, query: string, headers: Record<string, string> = {}): Promise<Response> {
  return worker.fetch(
    new Request(`${BASE}/v1/subscribe/${ch}${query}`, { headers: { "cf-connecting-ip": freshIp(), ...headers } }),
    relayEnv,
    createExecutionContext(),
  );
}

/** A WebSocket subscriber keeping each text frame as it came. */
async function socket(ch: string, query = "") {
  const res = await subscribe(ch, query, { upgrade: "websocket" });
  if (res.status !== 101 || !res.webSocket) throw new Error(`subscribe failed: ${res.status}`);
  const ws = res.webSocket;
  const texts: string[] = [];
  ws.accept();
  ws.addEventListener("message", (ev) => {
    texts.push(ev.data as string);
  });
  return { ws, texts };
}

/** An SSE reader keeping the stream's text as it came. */
async function sse(ch: string) {
  const res = await subscribe(ch, "", { accept: "text/event-stream" });
  if (res.status !== 200 || !res.body) throw new Error(`subscribe failed: ${res.status}`);
  const reader = res.body.getReader();
  const decoder = new TextDecoder();
  const state = { text: "" };
  void (async () => {
    for (;;) {
      const { done, value } = await reader.read().catch(() => ({ done: true, value: undefined }));
      if (done) return;
      state.text += decoder.decode(value, { stream: true });
    }
  })();
  return { state, cancel: () => reader.cancel().catch(() => {}) };
}

async function publisher(): Promise<string> {
  return (await mint({ sub: uniq("pub"), channels: ["public:side.*"], rl: "100000/s" })).access_token;
}

/** The channel, through a Worker with the small relays, knows its relays once a message went out. */
async function sendToChannel(ch: string, frames: SideFrame[]): Promise<void> {
  await runInDurableObject(channelStub(relayEnv, ch), (instance) => sendSide(instance, frames));
}

describe("side frames through the relays", () => {
  it("a summary reaches unbatched, batched and SSE subscribers on every relay after the messages; presence reaches none of them", async () => {
    const ch = `public:side.${uniq()}`;
    const t = await publisher();
    const plain = await socket(ch);
    const packed = await socket(ch, "?batch=1");
    const reader = await sse(ch);
    const plain2 = await socket(ch); // a second relay (2 per relay)
    expect((await publishTo(ch, t, { n: 1 })).status).toBe(200);
    await until(() => plain.texts.length === 1 && packed.texts.length === 1 && plain2.texts.length === 1, "message");
    await until(() => reader.state.text.includes('"seq":1'), "sse message");

    await sendToChannel(ch, [summary(ch, 7), presence(ch)]);
    await until(
      () => plain.texts.length === 2 && packed.texts.length === 2 && plain2.texts.length === 2,
      "summary on every socket",
    );
    await until(() => reader.state.text.includes("event: summary"), "sse summary");
    expect(JSON.parse(plain.texts[1] as string)).toMatchObject({ type: "summary", channel: ch, dropped: 7 });
    expect(JSON.parse(plain2.texts[1] as string)).toMatchObject({ type: "summary", dropped: 7 });
    expect(JSON.parse(packed.texts[1] as string)).toEqual([JSON.parse(summary(ch, 7).text)]);
    // On SSE: its own event, with no id (a reader's Last-Event-ID stays the last message's seq).
    const event = reader.state.text.slice(reader.state.text.indexOf("event: summary"));
    expect(event.startsWith(`event: summary\ndata: ${summary(ch, 7).text}\n\n`)).toBe(true);
    expect(reader.state.text.slice(reader.state.text.indexOf("event: message") - 20)).toMatch(/id: [A-Za-z0-9_-]+:1\n/);
    expect(reader.state.text).not.toContain("event: presence");
    for (const s of [plain, packed, plain2]) expect(s.texts.join("")).not.toContain('"presence"');

    // A side frame never enters history.
    expect((await historyOf(ch, null)).map((m) => m.type)).toEqual(["message"]);
    await closeAndWaitTold(ch, async () => {
      for (const s of [plain, packed, plain2]) s.ws.close();
      await reader.cancel();
    });
  });

  it("side frames in one call with messages come after them, packed into the same frame for a batched socket, also when FRAME_DELAY holds them", async () => {
    const ch = `public:side.${uniq()}`;
    const t = await publisher();
    const packed = await socket(ch, "?batch=1");
    const plain = await socket(ch);
    expect((await publishTo(ch, t, { n: 1 })).status).toBe(200);
    await until(() => packed.texts.length === 1 && plain.texts.length === 1, "first message");
    const head = 1;
    const text = (seq: number) =>
      `{"type":"message","channel":${JSON.stringify(ch)},"seq":${seq},"id":"m${seq}","data":{"n":${seq}},"published_at":1}`;
    await relayStub(ch).deliver([{ seq: 2, text: text(2) }], head + 1, [summary(ch, 3)]);
    await until(() => packed.texts.length === 2 && plain.texts.length === 3, "second message and summary");
    expect(JSON.parse(packed.texts[1] as string)).toEqual([JSON.parse(text(2)), JSON.parse(summary(ch, 3).text)]);
    expect(plain.texts.slice(1).map((x) => JSON.parse(x).type)).toEqual(["message", "summary"]);

    // Held under FRAME_DELAY: the message and the summary go out together when the delay ends.
    await runInDurableObject(relayStub(ch), (relay: Relay) => {
      relay.frameDelayMs = 50;
    });
    await relayStub(ch).deliver([{ seq: 3, text: text(3) }], 3, [summary(ch, 4)]);
    await until(() => packed.texts.length === 3, "held frame");
    expect(JSON.parse(packed.texts[2] as string)).toEqual([JSON.parse(text(3)), JSON.parse(summary(ch, 4).text)]);
    // A call with side frames alone is held too, and sent as one frame.
    await relayStub(ch).deliver([], 3, [summary(ch, 5)]);
    await until(() => packed.texts.length === 4, "held summary");
    expect(JSON.parse(packed.texts[3] as string)).toEqual([JSON.parse(summary(ch, 5).text)]);
    await closeAndWaitTold(ch, () => {
      packed.ws.close();
      plain.ws.close();
    });
  });

  it("a relay with no subscribers drops side frames without failing the call", async () => {
    const ch = `public:side.${uniq()}`;
    await relayStub(ch, 5).deliver([], 0, [summary(ch, 1)]);
    expect(await runInDurableObject(relayStub(ch, 5), (relay: Relay) => relay.counts())).toMatchObject({
      websockets: 0,
      sse: 0,
    });
  });
});
