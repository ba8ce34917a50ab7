/**
 * Browsers on other origins (CORS_ORIGINS): listed origins get CORS on every /v1/ route and their
 * preflights; `*` opens public reads only (a Pusher connection from an unlisted origin: public
 * channels only); an unlisted origin gets nothing, its preflight and its WebSocket upgrades 403;
 * requests without Origin are untouched.
 */
import { createExecutionContext } from "cloudflare:test";
import { afterEach, describe, expect, it } from "vitest";
import worker from "../../../src/index";
import { parseConfig, rawConfigFrom } from "../../../src/settings/settings";
import {
  ADMIN,
  adminHeaders,
  BASE,
  callAndWait,
  envWith,
  freshIp,
  mint,
  uniq,
  untilUnsubscribed,
} from "../../support/helpers";
import { evictHostOf } from "../../support/host-internals";
import { authFor, closePushers, openPusher, APP as PUSHER_APP } from "../../support/pusher";

const APP = "https://app.example";
const LOCAL = "http://localhost:5173";
const listed = envWith({ CORS_ORIGINS: `${APP}, ${LOCAL}` });
const star = envWith({ CORS_ORIGINS: "*" });
const mixed = envWith({ CORS_ORIGINS: `*,${APP}` });

function from(origin: string, init: RequestInit & { headers?: Record<string, string> } = {}): RequestInit {
  return { ...init, headers: { origin, "cf-connecting-ip": freshIp(), ...(init.headers ?? {}) } };
}

function preflight(origin: string, method: string, headers = ""): RequestInit {
  return from(origin, {
    method: "OPTIONS",
    headers: {
      "access-control-request-method": method,
      ...(headers ? { "access-control-request-headers": headers } : {}),
    },
  });
}

describe("CORS_ORIGINS: listed origins", () => {
  it("a preflight from a listed origin answers 204 with the methods, the headers Floodgate reads and a max age", async () => {
    const res = await callAndWait(
      `/v1/publish/public:${uniq()}.x`,
      preflight(APP, "POST", "authorization, content-type, idempotency-key"),
      listed,
    );
    expect(res.status).toBe(204);
    expect(res.headers.get("access-control-allow-origin")).toBe(APP);
    expect(res.headers.get("access-control-allow-methods")).toBe("GET, POST, PUT, DELETE");
    const allowed = (res.headers.get("access-control-allow-headers") ?? "").toLowerCase();
    for (const h of [
      "authorization",
      "content-type",
      "idempotency-key",
      "floodgate-priority",
      "floodgate-shard",
      "last-event-id",
    ]) {
      expect(allowed).toContain(h);
    }
    expect(res.headers.get("access-control-max-age")).toBe("600");
    expect(res.headers.get("vary")).toContain("Origin");
  });

  it("a publish from a listed origin carries its origin, Vary: Origin and the exposed rate-limit and refusal headers", async () => {
    const ch = `public:${uniq()}.cors`;
    const { access_token } = await mint({ sub: uniq("u"), channels: [ch] });
    const res = await callAndWait(
      `/v1/publish/${ch}`,
      from(LOCAL, { method: "POST", headers: { authorization: `Bearer ${access_token}` }, body: '{"hi":1}' }),
      listed,
    );
    expect(res.status).toBe(200);
    expect(res.headers.get("access-control-allow-origin")).toBe(LOCAL);
    expect(res.headers.get("vary")).toContain("Origin");
    const exposed = res.headers.get("access-control-expose-headers") ?? "";
    for (const h of ["Retry-After", "RateLimit", "RateLimit-Policy", "Floodgate-Refusal"]) expect(exposed).toContain(h);
  });

  it("errors carry CORS too, so a page can read a 401's body", async () => {
    const res = await callAndWait(`/v1/publish/public:${uniq()}.x`, from(APP, { method: "POST", body: "{}" }), listed);
    expect(res.status).toBe(401);
    expect(res.headers.get("access-control-allow-origin")).toBe(APP);
  });

  it("a 429 to a listed origin carries its CORS headers and exposes Retry-After, so the page can wait as told", async () => {
    const tight = envWith({ CORS_ORIGINS: APP, READ_RATE: "1/h", READ_BURST: "" });
    const ip = freshIp();
    const read = () =>
      callAndWait(`/v1/history/public:${uniq()}.x`, { headers: { origin: APP, "cf-connecting-ip": ip } }, tight);
    expect((await read()).status).toBe(200);
    const res = await read();
    expect(res.status).toBe(429);
    expect(res.headers.get("access-control-allow-origin")).toBe(APP);
    expect(res.headers.get("vary")).toContain("Origin");
    expect(Number(res.headers.get("retry-after"))).toBeGreaterThan(0);
    const exposed = (res.headers.get("access-control-expose-headers") ?? "").split(",").map((h) => h.trim());
    expect(exposed).toContain("Retry-After");
  });

  it("an origin not in the list gets no CORS headers, and its preflight answers 403 in the error shape", async () => {
    const other = "https://evil.example";
    const pre = await callAndWait(`/v1/history/public:${uniq()}.x`, preflight(other, "GET"), listed);
    expect(pre.status).toBe(403);
    expect(pre.headers.get("access-control-allow-origin")).toBeNull();
    expect(await pre.json()).toMatchObject({ code: "permission_denied", meta: { code: "PERMISSION_DENIED" } });
    const res = await callAndWait(`/v1/manifest`, from(other), listed);
    expect(res.status).toBe(200);
    expect(res.headers.get("access-control-allow-origin")).toBeNull();
  });

  it("a WebSocket upgrade from an unlisted origin answers 403 before upgrading; a listed one upgrades", async () => {
    const ch = `public:${uniq()}.ws`;
    const ws = {
      upgrade: "websocket",
      connection: "Upgrade",
      "sec-websocket-version": "13",
      "sec-websocket-key": "dGhlIHNhbXBsZSBub25jZQ==",
    };
    const refused = await callAndWait(`/v1/subscribe/${ch}`, from("https://evil.example", { headers: ws }), listed);
    expect(refused.status).toBe(403);
    expect(refused.webSocket).toBeNull();
    const ok = await callAndWait(`/v1/subscribe/${ch}`, from(APP, { headers: ws }), listed);
    expect(ok.status).toBe(101);
    ok.webSocket?.accept();
    ok.webSocket?.close(1000, "done");
  });

  it("requests without Origin (servers, native apps) are unaffected, WebSockets included", async () => {
    const res = await callAndWait(`/v1/manifest`, { headers: { "cf-connecting-ip": freshIp() } }, listed);
    expect(res.headers.get("access-control-allow-origin")).toBeNull();
    const ws = await callAndWait(
      `/v1/subscribe/public:${uniq()}.native`,
      { headers: { upgrade: "websocket", "cf-connecting-ip": freshIp() } },
      listed,
    );
    expect(ws.status).toBe(101);
    ws.webSocket?.accept();
    ws.webSocket?.close(1000, "done");
  });
});

describe("CORS_ORIGINS empty: no origin is listed", () => {
  const none = envWith({ CORS_ORIGINS: "" });

  it("a preflight answers 403 without CORS headers; other requests and WebSockets from any origin are untouched", async () => {
    const other = "https://elsewhere.example";
    const pre = await callAndWait(`/v1/publish/public:${uniq()}.x`, preflight(other, "POST", "authorization"), none);
    expect(pre.status).toBe(403);
    expect(pre.headers.get("access-control-allow-origin")).toBeNull();
    expect(await pre.json()).toMatchObject({ code: "permission_denied", meta: { code: "PERMISSION_DENIED" } });
    const res = await callAndWait(`/v1/manifest`, from(other), none);
    expect(res.status).toBe(200);
    expect(res.headers.get("access-control-allow-origin")).toBeNull();
    const ws = await callAndWait(
      `/v1/subscribe/public:${uniq()}.any`,
      from(other, { headers: { upgrade: "websocket", connection: "Upgrade", "sec-websocket-version": "13" } }),
      none,
    );
    expect(ws.status).toBe(101);
    ws.webSocket?.accept();
    ws.webSocket?.close(1000, "done");
  });
});

describe("CORS_ORIGINS: * opens public reads only", () => {
  it("history and SSE subscribe of a public channel and the manifest answer Access-Control-Allow-Origin: *; presence does not", async () => {
    const ch = `public:${uniq()}.open`;
    for (const path of [`/v1/history/${ch}`, "/v1/manifest"]) {
      const res = await callAndWait(path, from("https://any.example"), star);
      expect(res.status, path).toBe(200);
      expect(res.headers.get("access-control-allow-origin"), path).toBe("*");
    }
    const presence = await callAndWait(`/v1/presence/${ch}`, from("https://any.example"), star);
    expect(presence.headers.get("access-control-allow-origin")).toBeNull();
    const prePresence = await callAndWait(`/v1/presence/${ch}`, preflight("https://any.example", "GET"), star);
    expect(prePresence.status).toBe(403);
    // SSE: the stream's own response (it stays open, so it is read for its headers and cancelled).
    const sse = await worker.fetch(
      new Request(`${BASE}/v1/subscribe/${ch}`, {
        ...from("https://any.example", { headers: { accept: "text/event-stream" } }),
      }),
      star,
      createExecutionContext(),
    );
    expect(sse.status).toBe(200);
    expect(sse.headers.get("content-type")).toContain("text/event-stream");
    expect(sse.headers.get("access-control-allow-origin")).toBe("*");
    await sse.body?.cancel();
    await untilUnsubscribed(ch);
    const pre = await callAndWait(`/v1/history/${ch}`, preflight("https://any.example", "GET", "last-event-id"), star);
    expect(pre.status).toBe(204);
    expect(pre.headers.get("access-control-allow-origin")).toBe("*");
    expect(pre.headers.get("access-control-allow-methods")).toBe("GET");
    expect(pre.headers.get("access-control-max-age")).toBe("600");
  });

  it("a private channel, a publish, or a request carrying Authorization gets no CORS headers under *", async () => {
    const priv = `private:${uniq()}.a.b`;
    const res = await callAndWait(`/v1/history/${priv}`, from("https://any.example"), star);
    expect(res.headers.get("access-control-allow-origin")).toBeNull();
    const withAuth = await callAndWait(
      `/v1/history/public:${uniq()}.x`,
      from("https://any.example", { headers: { authorization: "Bearer x" } }),
      star,
    );
    expect(withAuth.headers.get("access-control-allow-origin")).toBeNull();
    const prePublish = await callAndWait(
      `/v1/publish/public:${uniq()}.x`,
      preflight("https://any.example", "POST"),
      star,
    );
    expect(prePublish.status).toBe(403);
    const preAuth = await callAndWait(
      `/v1/history/public:${uniq()}.x`,
      preflight("https://any.example", "GET", "authorization"),
      star,
    );
    expect(preAuth.status).toBe(403);
  });

  it("beside *, a listed origin keeps everything", async () => {
    const res = await callAndWait(`/v1/tokens`, preflight(APP, "POST", "authorization, content-type"), mixed);
    expect(res.status).toBe(204);
    expect(res.headers.get("access-control-allow-origin")).toBe(APP);
    const admin = await callAndWait(`/v1/admin/channels`, from(APP, { headers: adminHeaders() }), mixed);
    expect(admin.headers.get("access-control-allow-origin")).toBe(APP);
    expect(ADMIN.length).toBeGreaterThan(0);
  });
});

describe("CORS_ORIGINS: Pusher connections (/app/{key})", () => {
  const PUSHER_PATH = `/app/${PUSHER_APP.key}?protocol=7&client=js&version=8.6.0`;
  const upgrade = {
    upgrade: "websocket",
    connection: "Upgrade",
    "sec-websocket-version": "13",
    "sec-websocket-key": "dGhlIHNhbXBsZSBub25jZQ==",
  };
  afterEach(closePushers);

  it("an unlisted origin's upgrade answers 403 before upgrading when * is not set", async () => {
    const refused = await callAndWait(PUSHER_PATH, from("https://evil.example", { headers: upgrade }), listed);
    expect(refused.status).toBe(403);
    expect(refused.webSocket).toBeNull();
  });

  it("under *, an unlisted origin's connection opens for public reads only: private and presence subscribes are subscription_error 403, even signed", async () => {
    const p = await openPusher(PUSHER_PATH, star, { origin: "https://any.example" });
    expect(p.socketId).toMatch(/^\d+\.\d+$/);
    for (const name of [`private-${uniq()}`, `presence-${uniq()}`]) {
      const signed = await authFor(p, name, name.startsWith("presence-") ? { user_id: "visitor" } : undefined);
      expect(await p.subscribe(name, signed), name).toEqual({
        event: "pusher:subscription_error",
        channel: name,
        data: { type: "AuthError", error: expect.stringContaining("CORS_ORIGINS"), status: 403 },
      });
    }
    const pub = uniq("open-");
    expect(await p.subscribe(pub)).toMatchObject({ event: "pusher_internal:subscription_succeeded", channel: pub });
    // With no private channel it holds, it has nowhere to send a client event.
    const from = p.events.length;
    p.send({ event: "client-hi", channel: `private-${uniq()}`, data: "{}" });
    expect(await p.next((e) => e.event === "pusher:error", from)).toMatchObject({ data: { code: 4300 } });
  });

  it("the mark lives in the connection's attachment: after its host is evicted (the socket hibernated), a private subscribe is still 403", async () => {
    const p = await openPusher(PUSHER_PATH, star, { origin: "https://any.example" });
    const pub = uniq("open-");
    expect((await p.subscribe(pub)).event).toBe("pusher_internal:subscription_succeeded");
    expect(await evictHostOf(p.socketId)).toBe(true);
    const name = `private-${uniq()}`;
    expect(await p.subscribe(name, await authFor(p, name))).toMatchObject({
      event: "pusher:subscription_error",
      data: { status: 403 },
    });
  });

  it("a listed origin beside *, and a connection without Origin, subscribe to private channels as before", async () => {
    for (const headers of [{ origin: APP }, {}] as Record<string, string>[]) {
      const p = await openPusher(PUSHER_PATH, mixed, headers);
      const name = `private-${uniq()}`;
      expect(await p.subscribe(name, await authFor(p, name)), JSON.stringify(headers)).toMatchObject({
        event: "pusher_internal:subscription_succeeded",
        channel: name,
      });
    }
  });
});

describe("CORS_ORIGINS: configuration", () => {
  const NO_BUDGETS = { PUBLISH_RATE: "", SUBSCRIBE_RATE: "", TOKEN_ISSUE_RATE: "", READ_RATE: "" };
  it.each([
    "app.example",
    "https://app.example/",
    "https://app.example/path",
    "ftp://app.example",
    "https://*.example",
  ])("%s is not an origin: invalid configuration naming CORS_ORIGINS", (value) => {
    expect(() => parseConfig({ ...NO_BUDGETS, CORS_ORIGINS: value })).toThrow(/CORS_ORIGINS/);
  });

  describe("a deployment whose configuration is invalid", () => {
    const broken = (cors: string) => envWith({ CORS_ORIGINS: cors, PUBLISH_RATE: "fast" });

    it("answers a listed origin's preflight, and its 500 naming the variable carries that origin", async () => {
      const env = broken(APP);
      const pre = await callAndWait("/v1/manifest", preflight(APP, "GET", "authorization"), env);
      expect(pre.status).toBe(204);
      expect(pre.headers.get("access-control-allow-origin")).toBe(APP);
      const res = await callAndWait("/v1/manifest", from(APP), env);
      expect(res.status).toBe(500);
      expect(res.headers.get("access-control-allow-origin")).toBe(APP);
      expect(res.headers.get("access-control-expose-headers")).toContain("Retry-After");
      expect(res.headers.get("vary")).toContain("Origin");
      const body = (await res.json()) as { msg: string; meta: { variable: string } };
      expect(body.meta.variable).toBe("PUBLISH_RATE");
      expect(body.msg).toContain("PUBLISH_RATE");
    });

    it("gives an unlisted origin, and every origin when CORS_ORIGINS is itself invalid, no CORS headers", async () => {
      const unlisted = await callAndWait("/v1/manifest", from("https://other.example"), broken(APP));
      expect(unlisted.status).toBe(500);
      expect(unlisted.headers.get("access-control-allow-origin")).toBeNull();
      const pre = await callAndWait("/v1/manifest", preflight("https://other.example", "GET"), broken(APP));
      expect(pre.status).toBe(403);
      // With no origin listed, none is: a preflight answers 403 there too.
      const preNone = await callAndWait("/v1/manifest", preflight("https://other.example", "GET"), broken(""));
      expect(preNone.status).toBe(403);
      expect(preNone.headers.get("access-control-allow-origin")).toBeNull();
      const badCors = await callAndWait("/v1/manifest", from(APP), broken("app.example"));
      expect(badCors.status).toBe(500);
      expect(badCors.headers.get("access-control-allow-origin")).toBeNull();
    });

    it("under * allows any origin's public read of the 500, not one that carries Authorization", async () => {
      const read = await callAndWait("/v1/manifest", from("https://other.example"), broken("*"));
      expect(read.status).toBe(500);
      expect(read.headers.get("access-control-allow-origin")).toBe("*");
      const authed = await callAndWait(
        "/v1/manifest",
        from("https://other.example", { headers: { authorization: "Bearer x" } }),
        broken("*"),
      );
      expect(authed.headers.get("access-control-allow-origin")).toBeNull();
    });
  });

  it("the manifest shows the origins, * last; empty by default", async () => {
    const res = await callAndWait("/v1/manifest", {}, mixed);
    expect(((await res.json()) as { cors_origins: string[] }).cors_origins).toEqual([APP, "*"]);
    const shipped = parseConfig(rawConfigFrom((await import("cloudflare:workers")).env));
    expect([...shipped.cors.origins]).toEqual([]);
  });
});
