/**
 * Hostile input over HTTP: each request gets the API's error (never a 500, never backend text)
 * and leaves state unchanged. Plus the slow-consumer fault: a reader that stops reading is cut off
 * after a bounded backlog without stalling the others.
 */
import { env } from "cloudflare:workers";
import { describe, expect, it } from "vitest";
import type { ChannelStats } from "../../../src/channel/calls";
import { SLOW_CONSUMER_CLOSE, SUBSCRIBER_MAX_BEHIND_BYTES } from "../../../src/relay/bounds";
import { base64UrlEncode, signToken } from "../../../src/worker/auth/tokens";
import {
  ADMIN,
  adminHeaders,
  call,
  callAndWait,
  historyOf,
  openSocket,
  publisher,
  publishTo,
  readSse,
  uniq,
} from "../../support/helpers";

const SECRET = "test-token-secret-0123456789abcdef";

/** The channel's stats, once the requests before have finished their background work. */
async function channelStats(ch: string): Promise<ChannelStats> {
  const res = await callAndWait(`/v1/channels/${ch}/stats`, { headers: adminHeaders() });
  return (await res.json()) as ChannelStats;
}

async function lastSeq(ch: string): Promise<number> {
  return (await channelStats(ch)).last_seq;
}

async function expectError(res: Response, status: number, code: string): Promise<void> {
  expect(res.status).toBe(status);
  const text = await res.text();
  const body = JSON.parse(text) as { code: string; msg: string; meta: { code: string } };
  expect(body.code).toBe(code);
  expect(typeof body.msg).toBe("string");
  expect(text).not.toMatch(/at .*\.(ts|js):\d+|Error:|stack/);
}

describe("hostile bodies and headers", () => {
  it("deeply nested JSON is delivered exactly or refused with 400, never a 500", async () => {
    const ch = `public:hostile.${uniq()}`;
    const t = await publisher("public:hostile.*");
    for (const depth of [1000, 16_000]) {
      const body = `${"[".repeat(depth)}${"]".repeat(depth)}`;
      const res = await call(`/v1/publish/${ch}`, {
        method: "POST",
        headers: { authorization: `Bearer ${t}`, "content-type": "application/json" },
        body,
      });
      expect([200, 400]).toContain(res.status);
      if (res.status === 400) await expectError(res, 400, "invalid_argument");
    }
  });

  it("a huge Authorization header or Idempotency-Key is a 401 / 400 and charges nothing", async () => {
    const ch = `public:hostile.${uniq()}`;
    const t = await publisher("public:hostile.*");
    const before = await lastSeq(ch);
    await expectError(
      await call(`/v1/publish/${ch}`, {
        method: "POST",
        headers: { authorization: `Bearer ${"A".repeat(100_000)}` },
        body: "{}",
      }),
      401,
      "unauthenticated",
    );
    await expectError(
      await publishTo(ch, t, { x: 1 }, { "idempotency-key": "k".repeat(100_000) }),
      400,
      "invalid_argument",
    );
    await expectError(await publishTo(ch, t, { x: 1 }, { "idempotency-key": "has space" }), 400, "invalid_argument");
    expect(await lastSeq(ch)).toBe(before);
  });

  it("thousands of query parameters are handled, not a 500", async () => {
    const ch = `public:hostile.${uniq()}`;
    const t = await publisher("public:hostile.*");
    await publishTo(ch, t, { x: 1 });
    const junk = Array.from({ length: 5000 }, (_, i) => `p${i}=${i}`).join("&");
    const res = await call(`/v1/history/${ch}?${junk}&limit=10`);
    expect(res.status).toBe(200);
    expect(((await res.json()) as { messages: unknown[] }).messages).toHaveLength(1);
    const repeated = Array.from({ length: 5000 }, () => "after=0").join("&");
    expect((await call(`/v1/history/${ch}?${repeated}`)).status).toBe(200);
    await expectError(await call(`/v1/history/${ch}?after=-1`), 400, "invalid_argument");
    await expectError(await call(`/v1/history/${ch}?limit=1e3`), 400, "invalid_argument");
  });

  it("path traversal and encoded separators in channel names are 400s or 404s", async () => {
    const t = await publisher("public:hostile.*");
    for (const path of [
      "/v1/publish/public:hostile.%2e%2e",
      "/v1/publish/public:..%2F..%2Fadmin.x",
      "/v1/publish/public:hostile.a%00b",
      "/v1/publish/public:hostile.A",
      "/v1/publish/private:floodgate.analytics.dropped%2F..",
    ]) {
      const res = await call(path, {
        method: "POST",
        headers: { authorization: `Bearer ${t}`, "content-type": "application/json" },
        body: "{}",
      });
      expect([400, 403, 404], path).toContain(res.status);
      await res.text();
    }
    const res = await call("/v1/publish/../v1/admin/throttle/*", { method: "PUT", body: '{"rate":1}' });
    expect([401, 404]).toContain(res.status);
    expect(await env.THROTTLE_KV.get("throttleRate")).toBeNull();
  });
});

describe("hostile tokens", () => {
  const now = () => Math.floor(Date.now() / 1000);
  const claims = () => ({
    sub: "mallory",
    typ: "access" as const,
    chs: ["public:**"],
    scp: ["publish" as const, "subscribe" as const],
    iat: now(),
    exp: now() + 600,
    jti: uniq("j"),
  });
  const enc = (v: unknown) => base64UrlEncode(new TextEncoder().encode(JSON.stringify(v)));

  it("alg none, another algorithm, or a signature by the admin token are 401s", async () => {
    const ch = `public:hostile.${uniq()}`;
    const payload = enc(claims());
    const forged = [
      `${enc({ alg: "none", typ: "JWT" })}.${payload}.`,
      `${enc({ alg: "HS512", typ: "JWT" })}.${payload}.${enc("x")}`,
      `${enc({ alg: "RS256", typ: "JWT" })}.${payload}.${enc("x")}`,
      await signToken(claims(), ADMIN), // the admin token used as the HMAC key
      await signToken({ ...claims(), typ: "refresh" } as never, SECRET), // a refresh token as an access token
    ];
    for (const token of forged) {
      await expectError(await publishTo(ch, token, { x: 1 }), 401, "unauthenticated");
    }
    // The admin token itself is not an access token, and a user token is not the admin token.
    await expectError(await publishTo(ch, ADMIN, { x: 1 }), 401, "unauthenticated");
    const real = await signToken(claims(), SECRET);
    await expectError(
      await call("/v1/admin/throttle/*", {
        method: "PUT",
        headers: { authorization: `Bearer ${real}` },
        body: '{"rate":1}',
      }),
      401,
      "unauthenticated",
    );
    expect(await lastSeq(ch)).toBe(0);
  });
});

describe("slow consumer", () => {
  it("a WebSocket reader that stops reading is closed with 4008 past 1 MiB unread, and can resume", async () => {
    const ch = `public:hostile.${uniq()}`;
    const res = await call(`/v1/subscribe/${ch}`, { headers: { upgrade: "websocket" } });
    const stalled = res.webSocket;
    if (!stalled) throw new Error("no socket");
    // Not accepted yet: nothing is read, so the channel's sends pile up in the socket's buffer.
    const live = await openSocket(ch);
    const stub = env.CHANNEL.get(env.CHANNEL.idFromName(ch));
    const big = "x".repeat(30_000);
    const total = 100; // 3 MB: about three times the bound
    for (let i = 0; i < total; i++) {
      await stub.publishMany([
        { channel: ch, data: JSON.stringify({ i, big }), publisher: "p", action: "deliver", now: Date.now() },
      ]);
    }
    // The reader that keeps up gets everything, in order.
    const frames = await live.next(total);
    expect(frames.map((f) => (f.data as { i: number }).i)).toEqual(Array.from({ length: total }, (_, i) => i));
    const stats = await channelStats(ch);
    expect(stats).toMatchObject({ websockets: 1, slow_consumers_closed: 1 });
    // The stalled reader, reading at last: a gapless prefix of about the bound, then the close.
    const got: number[] = [];
    const closed = new Promise<{ code: number; reason: string }>((resolve) => {
      stalled.addEventListener("close", (ev) => resolve({ code: ev.code, reason: ev.reason }));
    });
    stalled.addEventListener("message", (ev) => got.push((JSON.parse(ev.data as string) as { seq: number }).seq));
    stalled.accept();
    const close = await closed;
    expect(close.code).toBe(SLOW_CONSUMER_CLOSE);
    expect(close.reason).toMatch(/slow consumer.*after=/);
    expect(got).toEqual(Array.from({ length: got.length }, (_, i) => i + 1));
    const bytesPerFrame = 30_100;
    expect(got.length).toBeGreaterThanOrEqual(Math.floor(SUBSCRIBER_MAX_BEHIND_BYTES / bytesPerFrame));
    expect(got.length).toBeLessThan(total);
    // Resuming after the last seq it got brings the rest, nothing skipped or repeated (a replay is
    // bounded in bytes too, so the rest may take more than one resume: test/bounds.test.ts).
    const resumed = await openSocket(ch, `?after=${got.at(-1)}`);
    const rest = await resumed.next(10);
    expect(rest.map((f) => f.seq)).toEqual(Array.from({ length: 10 }, (_, i) => got.length + i + 1));
    live.ws.close();
    resumed.ws.close();
  });
  // The SSE reader that stops reading: test/bounds.test.ts (the bound is in bytes).
});

describe("SSE under a busy channel", () => {
  it("a flush of thousands of frames reaches every reading SSE subscriber whole", async () => {
    // One flush used to be one stream chunk per frame: a big batch (a busy channel, a long replay)
    // filled the queue before the reader could take a chunk, and cut off a reader that was keeping
    // up. Now a flush is one chunk, shared by all SSE readers.
    const ch = `public:hostile.${uniq()}`;
    const readers = await Promise.all(
      [1, 2].map(() => call(`/v1/subscribe/${ch}`, { headers: { accept: "text/event-stream" } })),
    );
    for (const res of readers) expect(res.status).toBe(200);
    const total = 1500;
    const stub = env.CHANNEL.get(env.CHANNEL.idFromName(ch));
    await stub.publishMany(
      Array.from({ length: total }, (_, i) => ({
        channel: ch,
        data: `{"i":${i}}`,
        publisher: "p",
        action: "deliver" as const,
        now: Date.now(),
      })),
    );
    const stats = await channelStats(ch);
    expect(stats).toMatchObject({ sse: 2, slow_consumers_closed: 0 });
    for (const res of readers) {
      const events = await readSse(res, total);
      expect(events.map((e) => (e.data.data as { i: number }).i)).toEqual(Array.from({ length: total }, (_, i) => i));
      expect(events.map((e) => Number(e.id))).toEqual(Array.from({ length: total }, (_, i) => i + 1));
    }
  });
});

describe("state is unchanged by refused publishes", () => {
  it("history holds only the accepted message after a barrage of bad requests", async () => {
    const ch = `public:hostile.${uniq()}`;
    const t = await publisher("public:hostile.*");
    const bad: RequestInit[] = [
      { method: "POST", headers: { authorization: `Bearer ${t}` }, body: "{" },
      { method: "POST", headers: { authorization: `Bearer ${t}` }, body: "" },
      { method: "POST", headers: { authorization: `Bearer ${t}` }, body: new Uint8Array([0xff, 0xfe, 0x22]) },
      { method: "POST", headers: { authorization: `Bearer ${t}` }, body: "x".repeat(40_000) },
      { method: "POST", headers: { authorization: "Bearer " }, body: "{}" },
      { method: "POST", body: "{}" },
    ];
    for (const init of bad) {
      const res = await call(`/v1/publish/${ch}`, init);
      expect(res.status).toBeGreaterThanOrEqual(400);
      expect(res.status).toBeLessThan(500);
      await res.text();
    }
    expect((await publishTo(ch, t, { ok: true })).status).toBe(200);
    const h = await historyOf(ch, null);
    expect(h.map((f) => f.data)).toEqual([{ ok: true }]);
  });
});
