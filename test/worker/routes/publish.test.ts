/** Publish → WebSocket and SSE delivery, refusals, idempotency and a failing channel object, in workerd. */
import { env } from "cloudflare:workers";
import { describe, expect, it } from "vitest";
import type { PublishCommand } from "../../../src/channel/calls";
import { IDEMPOTENCY_TTL_MS } from "../../../src/channel/publishing";
import { closeAndWaitTold } from "../../support/closes-told";
import { call, historyOf, mint, openSocket, publishTo, readSse, seqOf, uniq, withFailing } from "../../support/helpers";

const token = async (chs = ["public:pub.*", "private:pub.team.*"], scopes = ["publish", "subscribe"]) =>
  (await mint({ sub: uniq("p"), channels: chs, scopes })).access_token;

describe("delivery", () => {
  it("delivers to a WebSocket subscriber in seq order with the API's frame", async () => {
    const ch = `public:pub.${uniq()}`;
    const t = await token();
    const sub = await openSocket(ch);
    const answers = [];
    for (let i = 0; i < 5; i++) answers.push((await (await publishTo(ch, t, { i })).json()) as Record<string, unknown>);
    const frames = await sub.next(5);
    expect(frames.map((f) => f.seq)).toEqual([1, 2, 3, 4, 5]);
    expect(frames.map((f) => f.data)).toEqual([0, 1, 2, 3, 4].map((i) => ({ i })));
    for (const [i, f] of frames.entries()) {
      expect(Object.keys(f).sort()).toEqual(["channel", "data", "epoch", "id", "published_at", "seq", "type"]);
      expect(f).toMatchObject({
        type: "message",
        channel: ch,
        id: answers[i]?.id,
        published_at: answers[i]?.published_at,
      });
    }
    expect(answers[0]).toMatchObject({ status: "delivered", channel: ch, seq: 1 });
    expect(typeof answers[0]?.published_at).toBe("number");
    await closeAndWaitTold(ch, () => sub.ws.close());
  });

  it("delivers to an SSE subscriber with id: <seq> and event: message", async () => {
    const ch = `public:pub.${uniq()}`;
    const t = await token();
    const res = await call(`/v1/subscribe/${ch}`, { headers: { accept: "text/event-stream" } });
    expect(res.status).toBe(200);
    expect(res.headers.get("content-type")).toMatch(/text\/event-stream/);
    // Read until the third event, then cancelled.
    const reading = closeAndWaitTold(ch, () => readSse(res, 3));
    for (let i = 0; i < 3; i++) expect((await publishTo(ch, t, { n: i, s: "line\nbreak" })).status).toBe(200);
    const events = await reading;
    expect(events.map((e) => seqOf(e.id))).toEqual([1, 2, 3]);
    expect(events.map((e) => e.data.data)).toEqual([0, 1, 2].map((n) => ({ n, s: "line\nbreak" })));
  });

  it("fans out to many sockets; every one gets every message once", async () => {
    const ch = `public:pub.${uniq()}`;
    const t = await token();
    const subs = await Promise.all(Array.from({ length: 5 }, () => openSocket(ch)));
    for (let i = 0; i < 10; i++) await publishTo(ch, t, i);
    for (const s of subs) {
      const frames = await s.next(10);
      expect(frames.map((f) => f.data)).toEqual([0, 1, 2, 3, 4, 5, 6, 7, 8, 9]);
    }
    await closeAndWaitTold(ch, () => {
      for (const s of subs) s.ws.close();
    });
  });

  it("keeps big integers and unusual JSON exactly as sent", async () => {
    const ch = `public:pub.${uniq()}`;
    const t = await token();
    const res = await call(`/v1/publish/${ch}`, {
      method: "POST",
      headers: { authorization: `Bearer ${t}` },
      body: '{\n  "big": 12345678901234567890,\r\n  "u": "\\u2028"\n}',
    });
    expect(res.status).toBe(200);
    const raw = await (await call(`/v1/history/${ch}`)).text();
    expect(raw).toContain('"big": 12345678901234567890');
  });

  it("never publishes frames a subscriber sends: the sender is closed with 1008, the others go on", async () => {
    const ch = `public:pub.${uniq()}`;
    const t = await token();
    const talker = await openSocket(ch);
    const closed = new Promise<number>((resolve) => talker.ws.addEventListener("close", (ev) => resolve(ev.code)));
    const sub = await openSocket(ch);
    talker.ws.send(JSON.stringify({ type: "message", data: "injected" }));
    expect(await closed).toBe(1008);
    await publishTo(ch, t, "real");
    const frames = await sub.next(1);
    expect(frames.map((f) => f.data)).toEqual(["real"]);
    expect((await historyOf(ch, null)).map((f) => f.data)).toEqual(["real"]);
    await closeAndWaitTold(ch, () => sub.ws.close());
  });
});

describe("refusals before anything changes", () => {
  it.each([
    ["bad channel", "public:BAD", {}, '{"a":1}', 400, "INVALID_ARGUMENT"],
    ["no token", "public:pub.refuse", { authorization: "" }, "1", 401, "UNAUTHENTICATED"],
    ["garbage token", "public:pub.refuse", { authorization: "Bearer x.y.z" }, "1", 401, "UNAUTHENTICATED"],
    ["not JSON", "public:pub.refuse", {}, "{nope", 400, "INVALID_ARGUMENT"],
    ["empty body", "public:pub.refuse", {}, "", 400, "INVALID_ARGUMENT"],
    ["bad idempotency key", "public:pub.refuse", { "idempotency-key": "x".repeat(65) }, "1", 400, "INVALID_ARGUMENT"],
    ["empty idempotency key", "public:pub.refuse", { "idempotency-key": "" }, "1", 400, "INVALID_ARGUMENT"],
    ["non-ASCII idempotency key", "public:pub.refuse", { "idempotency-key": "kéy" }, "1", 400, "INVALID_ARGUMENT"],
  ])("%s → %d", async (_what, ch, headers, body, status, metaCode) => {
    const t = await token(["public:pub.*"]);
    const res = await call(`/v1/publish/${ch}`, {
      method: "POST",
      headers: { authorization: `Bearer ${t}`, ...headers },
      body,
    });
    expect(res.status).toBe(status);
    const json = (await res.json()) as { code: string; msg: string; meta: { code: string } };
    expect(json.meta.code).toBe(metaCode);
    expect(typeof json.msg).toBe("string");
    if (ch !== "public:BAD") expect(await historyOf(ch, null)).toEqual([]);
  });

  it("a refresh token used to publish is a 401 that says an access token is needed", async () => {
    const ch = `public:pub.${uniq()}`;
    const pair = await mint({ sub: uniq("p"), channels: ["public:pub.*"] });
    const res = await publishTo(ch, pair.refresh_token, 1);
    expect(res.status).toBe(401);
    expect(await res.json()).toMatchObject({ code: "unauthenticated", msg: "expected an access token" });
    expect(await historyOf(ch, null)).toEqual([]);
  });

  it("413s a body over MAX_MESSAGE_BYTES, with or without Content-Length", async () => {
    const ch = `public:pub.${uniq()}`;
    const t = await token();
    const big = JSON.stringify("x".repeat(40_000));
    const withLength = await call(`/v1/publish/${ch}`, {
      method: "POST",
      headers: { authorization: `Bearer ${t}` },
      body: big,
    });
    expect(withLength.status).toBe(413);
    expect(await withLength.json()).toMatchObject({ code: "invalid_argument", meta: { code: "PAYLOAD_TOO_LARGE" } });
    const stream = new ReadableStream<Uint8Array>({
      start(c) {
        for (let i = 0; i < 10; i++) c.enqueue(new TextEncoder().encode("x".repeat(5000)));
        c.close();
      },
    });
    const chunked = await call(`/v1/publish/${ch}`, {
      method: "POST",
      headers: { authorization: `Bearer ${t}` },
      body: stream,
      // @ts-expect-error workerd accepts duplex for streaming request bodies
      duplex: "half",
    });
    expect(chunked.status).toBe(413);
    expect(await historyOf(ch, null)).toEqual([]);
  });

  it("400s invalid UTF-8", async () => {
    const ch = `public:pub.${uniq()}`;
    const t = await token();
    const res = await call(`/v1/publish/${ch}`, {
      method: "POST",
      headers: { authorization: `Bearer ${t}` },
      body: new Uint8Array([0x22, 0xff, 0xfe, 0x22]),
    });
    expect(res.status).toBe(400);
  });

  it("403s a token without publish scope or for another channel", async () => {
    const ch = `public:pub.${uniq()}`;
    expect((await publishTo(ch, await token(["public:pub.*"], ["subscribe"]), 1)).status).toBe(403);
    expect((await publishTo(ch, await token(["public:elsewhere.*"]), 1)).status).toBe(403);
  });
});

describe("idempotency", () => {
  it("a retry with the same key answers the first result again and delivers once", async () => {
    const ch = `public:pub.${uniq()}`;
    const t = await token();
    const sub = await openSocket(ch);
    const first = await publishTo(ch, t, { order: 1 }, { "idempotency-key": "retry-1" });
    const second = await publishTo(ch, t, { order: 1 }, { "idempotency-key": "retry-1" });
    expect(first.status).toBe(200);
    expect(second.status).toBe(200);
    expect(await second.json()).toEqual(await first.json());
    await publishTo(ch, t, { order: 2 });
    const frames = await sub.next(2);
    expect(frames.map((f) => f.data)).toEqual([{ order: 1 }, { order: 2 }]);
    expect(await historyOf(ch, null)).toHaveLength(2);
    await closeAndWaitTold(ch, () => sub.ws.close());
  });

  it("a key is remembered for 10 minutes, then the same key is a new message", async () => {
    const ch = `public:pub.${uniq()}`;
    const stub = env.CHANNEL.get(env.CHANNEL.idFromName(ch));
    const t0 = Date.now();
    // The object decides by the publish's own time, so ten minutes pass without waiting for them.
    const publishAt = async (now: number) => {
      const cmd: PublishCommand = {
        channel: ch,
        data: "1",
        publisher: "alice",
        action: "deliver",
        idempotencyKey: "k",
        now,
      };
      const {
        outcomes: [outcome],
      } = await stub.publishMany([cmd]);
      return outcome as { seq: number; replayed: boolean };
    };
    expect(await publishAt(t0)).toMatchObject({ seq: 1, replayed: false });
    expect(await publishAt(t0 + IDEMPOTENCY_TTL_MS - 1)).toMatchObject({ seq: 1, replayed: true });
    expect(await publishAt(t0 + IDEMPOTENCY_TTL_MS)).toMatchObject({ seq: 2, replayed: false });
    expect(await publishAt(t0 + IDEMPOTENCY_TTL_MS + 1)).toMatchObject({ seq: 2, replayed: true });
    expect(await historyOf(ch, null)).toHaveLength(2);
  });

  it("a key belongs to the channel: another publisher's repeat of it answers the first result", async () => {
    const ch = `public:pub.${uniq()}`;
    const other = `public:pub.${uniq()}`;
    const alice = await token();
    const bob = await token();
    const key = { "idempotency-key": "shared-key" };
    const a = (await (await publishTo(ch, alice, "from alice", key)).json()) as Record<string, unknown>;
    const b = await publishTo(ch, bob, "from bob", key);
    expect(b.status).toBe(200);
    expect(await b.json()).toEqual(a);
    // The same key on another channel is that channel's own.
    const elsewhere = (await (await publishTo(other, bob, "from bob", key)).json()) as { seq: number };
    expect(elsewhere.seq).toBe(1);
    expect((await historyOf(ch, null)).map((f) => f.data)).toEqual(["from alice"]);
    expect((await historyOf(other, null)).map((f) => f.data)).toEqual(["from bob"]);
  });

  it("different keys are different messages", async () => {
    const ch = `public:pub.${uniq()}`;
    const t = await token();
    await publishTo(ch, t, 1, { "idempotency-key": "a" });
    await publishTo(ch, t, 1, { "idempotency-key": "b" });
    expect(await historyOf(ch, null)).toHaveLength(2);
  });
});

describe("channel object failure", () => {
  it("answers 503 unavailable without backend text, and a retry with the same key delivers once", async () => {
    const { ChannelObject } = await import("../../../src/channel/channel-object");
    const ch = `public:pub.${uniq()}`;
    const t = await token();
    const res = await withFailing(ChannelObject, "publishMany", "SQLITE_BUSY: internal detail", () =>
      publishTo(ch, t, { n: 1 }, { "idempotency-key": "k1" }),
    );
    expect(res.status).toBe(503);
    const text = await res.text();
    expect(JSON.parse(text)).toMatchObject({ code: "unavailable", meta: { code: "UNAVAILABLE" } });
    expect(text).not.toMatch(/SQLITE|internal detail/);
    expect((await publishTo(ch, t, { n: 1 }, { "idempotency-key": "k1" })).status).toBe(200);
    expect((await publishTo(ch, t, { n: 1 }, { "idempotency-key": "k1" })).status).toBe(200);
    expect(await historyOf(ch, null)).toHaveLength(1);
  });
});
