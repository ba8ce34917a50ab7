/**
 * Packed frames (docs/api.md, "Packed frames"): a WebSocket subscriber with `?batch=1` gets JSON
 * arrays of message frames, every message once and in seq order, across relays, beside unbatched
 * subscribers of the same channel; replays, resumes and repairs are packed too; a frame holds at most
 * its byte bound; `FRAME_DELAY` holds a frame at most that long; `batch` other than 0 or 1 answers
 * 400 (WebSocket and SSE); the client asks for packed frames and hands messages over one by one.
 * Real sockets in workerd. A relay's byte bound per frame and its delay are lowered or raised on the
 * relay object itself (its `maxFrameBytes`, `frameDelayMs`), as other tests lower its memory cap.
 */
import { createExecutionContext, evictDurableObject, runInDurableObject } from "cloudflare:test";
import { exports } from "cloudflare:workers";
import { FloodgateClient, type Message, type SocketLike } from "@floodgate/client";
import { describe, expect, it } from "vitest";
import worker from "../../src/index";
import { FRAME_MAX_BYTES } from "../../src/relay/bounds";
import { Relay } from "../../src/relay/relay";
import { ConfigError, parseConfig, rawConfigFrom } from "../../src/settings/settings";
import { type LiveFrame, packFrames, utf8Length } from "../../src/wire/frame-text";
import { closeAndWaitTold } from "../support/closes-told";
import {
  BASE,
  call,
  env,
  envWith,
  type Frame,
  freshIp,
  mint,
  publishTo,
  readSse,
  relayObject as relayStub,
  SLOW_TEST_MS,
  seqOf,
  uniq,
  until,
  withFailing,
} from "../support/helpers";

const CAPACITY = 4;
const relayEnv = envWith({ RELAY_CAPACITY: String(CAPACITY), SUBSCRIBE_BURST: "1000", READ_BURST: "1000" });

async function publisher(): Promise<string> {
  return (await mint({ sub: uniq("pub"), channels: ["public:packed.*"], rl: "100000/s" })).access_token;
}

/**
 * A WebSocket subscriber that keeps every text frame as it came (its raw text and what it parsed
 * to) and the messages they carry, in arrival order.
 */
async function subscriber(ch: string, query = "", customEnv: Env = relayEnv) {
  const res = await worker.fetch(
    new Request(`${BASE}/v1/subscribe/${ch}${query}`, {
      headers: { upgrade: "websocket", "cf-connecting-ip": freshIp() },
    }),
    customEnv,
    createExecutionContext(),
  );
  if (res.status !== 101 || !res.webSocket) throw new Error(`subscribe failed: ${res.status} ${await res.text()}`);
  const ws = res.webSocket;
  const raw: { text: string; parsed: unknown; at: number }[] = [];
  const messages: Frame[] = [];
  ws.accept();
  ws.addEventListener("message", (ev) => {
    const text = ev.data as string;
    const parsed: unknown = JSON.parse(text);
    raw.push({ text, parsed, at: Date.now() });
    for (const m of Array.isArray(parsed) ? parsed : [parsed]) messages.push(m as Frame);
  });
  const next = async (n: number) => {
    await until(() => messages.length >= n, `${n} messages (have ${messages.length})`);
    return messages.slice();
  };
  return { ws, raw, messages, next };
}

const seqs = (frames: Frame[]) => frames.map((f) => f.seq);
const range = (from: number, to: number) => Array.from({ length: to - from + 1 }, (_, i) => from + i);

/** Every frame is an array of message frames (packed), or every frame is one message (unbatched). */
function expectPacked(raw: { parsed: unknown }[], packed: boolean): void {
  for (const { parsed } of raw) {
    expect(Array.isArray(parsed)).toBe(packed);
    if (Array.isArray(parsed)) {
      expect(parsed.length).toBeGreaterThan(0);
      for (const m of parsed) expect((m as Frame).type).toBe("message");
    }
  }
}

async function publishAll(ch: string, t: string, from: number, to: number): Promise<void> {
  for (let i = from; i <= to; i++) expect((await publishTo(ch, t, { i })).status).toBe(200);
}

describe("packed frames over relays", () => {
  it("batched and unbatched subscribers of one channel over several relays each get every message once, in seq order", {
    timeout: SLOW_TEST_MS,
  }, async () => {
    const ch = `public:packed.${uniq()}`;
    const t = await publisher();
    const batched: Awaited<ReturnType<typeof subscriber>>[] = [];
    const plain: Awaited<ReturnType<typeof subscriber>>[] = [];
    for (let i = 0; i < 12; i++) {
      if (i % 2 === 0) batched.push(await subscriber(ch, "?batch=1"));
      else plain.push(await subscriber(ch, i % 4 === 1 ? "?batch=0" : ""));
    }
    // Publishes in flight together, so deliveries coalesce on each relay's line.
    const N = 30;
    for (let i = 1; i <= N; i += 6) {
      const burst = [];
      for (let k = i; k < i + 6; k++) burst.push(publishTo(ch, t, { k }));
      for (const r of await Promise.all(burst)) expect(r.status).toBe(200);
    }
    for (const s of [...batched, ...plain]) expect(seqs(await s.next(N))).toEqual(range(1, N));
    for (const s of batched) expectPacked(s.raw, true);
    for (const s of plain) {
      expectPacked(s.raw, false);
      expect(s.raw.length).toBe(N);
    }
    // The relays (12 subscribers, 4 per relay) are several, and the messages are the channel's.
    expect((await runInDurableObject(relayStub(ch, 2), (r) => r.counts())).websockets).toBeGreaterThan(0);
    const history = (await (await call(`/v1/history/${ch}?after=0&limit=100`)).json()) as { messages: Frame[] };
    for (const s of batched) expect(s.messages).toEqual(history.messages);
    await closeAndWaitTold(ch, () => {
      for (const s of [...batched, ...plain]) s.ws.close();
    });
  });

  it("a repair from history reaches a batched socket packed, and a relay's eviction keeps the socket batched", async () => {
    const ch = `public:packed.${uniq()}`;
    const t = await publisher();
    const s = await subscriber(ch, "?batch=1");
    await publishAll(ch, t, 1, 1);
    await s.next(1);
    // The relay fails every call while 2..5 are published; the channel's line then retries with the
    // head, and the relay fetches the hole from history and sends it as one frame.
    await withFailing(Relay, "deliver", "relay aborted", async () => publishAll(ch, t, 2, 5));
    expect(seqs(await s.next(5))).toEqual(range(1, 5));
    expect(s.raw.map((r) => (r.parsed as Frame[]).map((m) => m.seq))).toContainEqual(range(2, 5));
    // Hibernation-like eviction: the socket's attachment keeps it batched.
    await evictDurableObject(relayStub(ch));
    await publishAll(ch, t, 6, 7);
    expect(seqs(await s.next(7))).toEqual(range(1, 7));
    expectPacked(s.raw, true);
    await closeAndWaitTold(ch, () => s.ws.close());
  });

  it("a resume with ?after= replays the retained messages packed, then continues live with no gap or repeat", async () => {
    const ch = `public:packed.${uniq()}`;
    const t = await publisher();
    await publishAll(ch, t, 1, 5);
    const s = await subscriber(ch, "?batch=1&after=2");
    expect(seqs(await s.next(3))).toEqual(range(3, 5));
    // The replay is one frame: three messages, one send.
    expect(s.raw).toHaveLength(1);
    await publishAll(ch, t, 6, 8);
    expect(seqs(await s.next(6))).toEqual(range(3, 8));
    expectPacked(s.raw, true);
    // An unbatched resume of the same channel gets the same messages one per frame.
    const plain = await subscriber(ch, "?after=2");
    expect(seqs(await plain.next(6))).toEqual(range(3, 8));
    expect(plain.raw).toHaveLength(6);
    expectPacked(plain.raw, false);
    await closeAndWaitTold(ch, () => {
      s.ws.close();
      plain.ws.close();
    });
  });

  it("no frame holds more than the relay's byte bound; what does not fit goes in the next frames, in order", async () => {
    const ch = `public:packed.${uniq()}`;
    const t = await publisher();
    const s = await subscriber(ch, "?batch=1");
    await publishAll(ch, t, 1, 1);
    await s.next(1);
    const bound = 1500;
    await runInDurableObject(relayStub(ch), (r) => {
      r.maxFrameBytes = bound;
    });
    // Ten messages of about 400 bytes arrive together (a repair): they need at least three frames.
    const pad = "x".repeat(300);
    await withFailing(Relay, "deliver", "relay aborted", async () => {
      for (let i = 2; i <= 11; i++) expect((await publishTo(ch, t, { i, pad })).status).toBe(200);
    });
    expect(seqs(await s.next(11))).toEqual(range(1, 11));
    const repaired = s.raw.slice(1);
    expect(repaired.length).toBeGreaterThanOrEqual(3);
    expect(repaired.length).toBeLessThan(10);
    for (const r of repaired) expect(utf8Length(r.text)).toBeLessThanOrEqual(bound);
    expectPacked(s.raw, true);
    await closeAndWaitTold(ch, () => s.ws.close());
  });

  it("packs at most 1 MiB per frame, joined from the frame texts in order (at least one frame each)", () => {
    const big = "y".repeat(30_000);
    const frames: LiveFrame[] = range(1, 80).map((seq) => ({
      seq,
      text: `{"type":"message","channel":"public:x","seq":${seq},"id":"m${seq}","data":"${big}é","published_at":1}`,
    }));
    const packed = packFrames(frames, FRAME_MAX_BYTES);
    const total = frames.reduce((a, f) => a + utf8Length(f.text) + 1, 1);
    expect(packed.length).toBe(Math.ceil(total / FRAME_MAX_BYTES));
    for (const p of packed) expect(utf8Length(p)).toBeLessThanOrEqual(FRAME_MAX_BYTES);
    expect(packed.flatMap((p) => (JSON.parse(p) as Frame[]).map((m) => m.seq))).toEqual(range(1, 80));
    expect(packed.join("")).toBe(
      packed.map((p) => `[${(JSON.parse(p) as unknown[]).map((m) => JSON.stringify(m)).join(",")}]`).join(""),
    );
    // One frame larger than the bound still goes, alone.
    expect(packFrames(frames.slice(0, 2), 100)).toEqual(frames.slice(0, 2).map((f) => `[${f.text}]`));
  });
});

describe("FRAME_DELAY", () => {
  it("holds a batched socket's frame at most FRAME_DELAY to pack more into it, and never an unbatched one's", async () => {
    const ch = `public:packed.${uniq()}`;
    const t = await publisher();
    const packed = await subscriber(ch, "?batch=1");
    const plain = await subscriber(ch);
    const delay = 400;
    await runInDurableObject(relayStub(ch), (r) => {
      r.frameDelayMs = delay;
    });
    // One message alone: it waits for company, but no longer than the delay. The unbatched socket on
    // the same relay gets it the moment the relay does: the time between the two is the hold.
    await publishAll(ch, t, 1, 1);
    await packed.next(1);
    await plain.next(1);
    const held = (packed.raw[0]?.at ?? 0) - (plain.raw[0]?.at ?? 0);
    expect(held).toBeLessThanOrEqual(delay + 150);
    // Messages published one after another within the delay share frames.
    await publishAll(ch, t, 2, 7);
    expect(seqs(await packed.next(7))).toEqual(range(1, 7));
    expect(packed.raw.length).toBeLessThan(7);
    // The unbatched subscriber got each at once, one per frame.
    expect(seqs(await plain.next(7))).toEqual(range(1, 7));
    expect(plain.raw).toHaveLength(7);
    // A joiner while frames are held gets each message once: the held ones in its replay.
    await publishAll(ch, t, 8, 8);
    const joiner = await subscriber(ch, "?batch=1&after=7");
    await publishAll(ch, t, 9, 9);
    expect(seqs(await joiner.next(2))).toEqual([8, 9]);
    expect(seqs(await packed.next(9))).toEqual(range(1, 9));
    await closeAndWaitTold(ch, () => {
      for (const s of [packed, plain, joiner]) s.ws.close();
    });
  });

  it("is a duration from 0ms to 1s, 0ms by default", () => {
    const { FRAME_DELAY: _shipped, ...rest } = rawConfigFrom(env);
    expect(parseConfig(rest).frameDelayMs).toBe(0);
    expect(parseConfig({ ...rest, FRAME_DELAY: "250ms" }).frameDelayMs).toBe(250);
    expect(parseConfig({ ...rest, FRAME_DELAY: "1s" }).frameDelayMs).toBe(1000);
    expect(parseConfig({ ...rest, FRAME_DELAY: "0ms" }).frameDelayMs).toBe(0);
    expect(parseConfig({ ...rest, FRAME_DELAY: "0" }).frameDelayMs).toBe(0); // zero needs no unit
    for (const bad of ["1.5s", "2s", "10", "soon", "-5ms"]) {
      expect(() => parseConfig({ ...rest, FRAME_DELAY: bad })).toThrow(ConfigError);
      expect(() => parseConfig({ ...rest, FRAME_DELAY: bad })).toThrow(/FRAME_DELAY/);
    }
  });
});

describe("the batch parameter", () => {
  it("answers 400 for a value other than 0 or 1, on WebSocket and SSE alike, before any upgrade", async () => {
    const ch = `public:packed.${uniq()}`;
    for (const value of ["2", "true", "", "01"]) {
      const modes: Record<string, string>[] = [{ upgrade: "websocket" }, { accept: "text/event-stream" }];
      for (const headers of modes) {
        const res = await call(`/v1/subscribe/${ch}?batch=${value}`, { headers });
        expect(res.status).toBe(400);
        expect(res.webSocket).toBeFalsy();
        expect(await res.json()).toMatchObject({
          code: "invalid_argument",
          msg: expect.stringContaining("batch"),
          meta: { code: "INVALID_ARGUMENT" },
        });
      }
    }
  });

  it("with batch=1 SSE still sends one event per message", async () => {
    const ch = `public:packed.${uniq()}`;
    const t = await publisher();
    await publishAll(ch, t, 1, 3);
    const res = await call(`/v1/subscribe/${ch}?batch=1&after=0`, { headers: { accept: "text/event-stream" } });
    expect(res.status).toBe(200);
    // Read until the third event, then cancelled.
    const events = await closeAndWaitTold(ch, () => readSse(res, 3));
    expect(events.map((e) => seqOf(e.id))).toEqual([1, 2, 3]);
    for (const e of events) expect(Array.isArray(e.data)).toBe(false);
    expect(seqs(events.map((e) => e.data))).toEqual([1, 2, 3]);
  });
});

describe("client", () => {
  /** Opens WebSockets through the Worker, recording each URL and the raw text frames. */
  function recordingOpener(rewrite: (url: string) => string = (u) => u) {
    const urls: string[] = [];
    const texts: string[] = [];
    const open = async (url: string, protocols: string[]): Promise<SocketLike> => {
      urls.push(url);
      const res = await exports.default.fetch(
        new Request(rewrite(url).replace(/^ws/, "http"), {
          headers: { upgrade: "websocket", "sec-websocket-protocol": protocols.join(", ") },
        }),
      );
      if (res.status !== 101 || !res.webSocket) throw new Error(`upgrade failed: ${res.status}`);
      res.webSocket.accept();
      res.webSocket.addEventListener("message", (ev) => {
        texts.push(ev.data as string);
      });
      return res.webSocket as unknown as SocketLike;
    };
    return { open, urls, texts };
  }

  it("asks for batch=1 on WebSocket and hands the messages of a packed frame over one by one", async () => {
    const ch = `public:packed.${uniq()}`;
    const t = await publisher();
    await publishAll(ch, t, 1, 4);
    const opener = recordingOpener();
    const fg = new FloodgateClient({ baseUrl: BASE, openWebSocket: opener.open, sleep: async () => {} });
    const got: Message[] = [];
    const sub = fg.subscribe(ch, (m) => got.push(m), { after: 0 });
    await until(() => got.length >= 4, "the replay");
    await publishAll(ch, t, 5, 5);
    await until(() => got.length >= 5, "the live message");
    await closeAndWaitTold(ch, () => sub.close());
    expect(new URL(opener.urls[0] ?? "").searchParams.get("batch")).toBe("1");
    expect(new URL(opener.urls[0] ?? "").searchParams.get("after")).toBe("0");
    // The replay came as one packed frame; the application still got five messages, each alone.
    expect(JSON.parse(opener.texts[0] ?? "null")).toHaveLength(4);
    expect(got.map((m) => m.seq)).toEqual(range(1, 5));
    for (const m of got) expect(Array.isArray(m)).toBe(false);
  });

  it("still takes unbatched frames (a server that sends one message per frame)", async () => {
    const ch = `public:packed.${uniq()}`;
    const t = await publisher();
    await publishAll(ch, t, 1, 3);
    const opener = recordingOpener((url) => url.replace(/([?&])batch=1&?/, "$1"));
    const fg = new FloodgateClient({ baseUrl: BASE, openWebSocket: opener.open, sleep: async () => {} });
    const got: Message[] = [];
    const sub = fg.subscribe(ch, (m) => got.push(m), { after: 0 });
    await until(() => got.length >= 3, "the replay");
    await closeAndWaitTold(ch, () => sub.close());
    expect(opener.texts).toHaveLength(3);
    for (const text of opener.texts) expect(Array.isArray(JSON.parse(text))).toBe(false);
    expect(got.map((m) => m.seq)).toEqual([1, 2, 3]);
  });
});
