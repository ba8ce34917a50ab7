/**
 * How the TypeScript client meets the ends the server gives a subscription (docs/client.md): a
 * WebSocket's `expired` frame renews it at once, without waiting for the 4001 close (which over some
 * networks never completes its handshake: the client would hang in CLOSING); `session revoked` is
 * handled as expiry (the refresh is refused, so it is an ordinary disconnect); an anonymous SSE
 * stream ended at its longest lifetime resumes at once from its position, with no error.
 */
import { runInDurableObject } from "cloudflare:test";
import { env, exports } from "cloudflare:workers";
import { FloodgateClient, type Message, type SocketLike } from "@floodgate/client";
import { describe, expect, it } from "vitest";
import { SSE_ANONYMOUS_MAX_MS } from "../../src/relay/bounds";
import { relayName } from "../../src/relay/placement";
import type { Relay } from "../../src/relay/relay";
import { BASE, mint, publishTo, uniq, until } from "../support/helpers";

const workerFetch = (input: string, init?: RequestInit) => exports.default.fetch(new Request(input, init));

/** Runs the channel's relay's alarm work as if it were `now`. */
const relayTick = (ch: string, now: number) =>
  runInDurableObject(env.RELAY.get(env.RELAY.idFromName(relayName(ch, "local", 0))) as DurableObjectStub<Relay>, (r) =>
    r.tick(now),
  );

/**
 * Opens real WebSockets through the Worker, whose close events never reach the client: what a client
 * sees today over a network when the relay closes a socket from its alarm (the Close frame arrives,
 * the close never completes).
 */
function socketsWithoutClose() {
  const sockets: WebSocket[] = [];
  const open = async (url: string, protocols: string[]): Promise<SocketLike> => {
    const res = await exports.default.fetch(
      new Request(url.replace(/^ws/, "http"), {
        headers: { upgrade: "websocket", "sec-websocket-protocol": protocols.join(", ") },
      }),
    );
    if (res.status !== 101 || !res.webSocket) throw new Error(`upgrade failed: ${res.status}`);
    const ws = res.webSocket;
    ws.accept();
    sockets.push(ws);
    return {
      addEventListener: (type: string, fn: (ev: never) => void) => {
        if (type === "message") ws.addEventListener("message", fn as (ev: MessageEvent) => void);
      },
      close: (code?: number, reason?: string) => ws.close(code, reason),
    } as SocketLike;
  };
  return { open, sockets };
}

describe("the client and the ends of a subscription", () => {
  it("websocket: renews on the `expired` frame without waiting for a close that never comes", async () => {
    const ch = `public:client.${uniq()}`;
    const pub = (await mint({ sub: uniq(), channels: ["public:client.*"] })).access_token;
    const pair = await mint({ sub: uniq("exp"), channels: ["public:client.*"] });
    const ws = socketsWithoutClose();
    const errors: unknown[] = [];
    const refreshed: string[] = [];
    const fg = new FloodgateClient({
      baseUrl: BASE,
      accessToken: pair.access_token,
      refreshToken: pair.refresh_token,
      onTokens: (p) => refreshed.push(p.access_token),
      openWebSocket: ws.open,
      fetch: workerFetch,
      sleep: async () => {},
    });
    const got: Message[] = [];
    const sub = fg.subscribe(ch, (m) => got.push(m), { transport: "websocket", onError: (e) => errors.push(e) });
    await until(() => ws.sockets.length === 1 && sub.state === "live", "the first socket");
    await publishTo(ch, pub, { i: 1 });
    await until(() => got.length === 1, "1 message");
    await relayTick(ch, pair.expires_at * 1000);
    await until(() => refreshed.length === 1 && ws.sockets.length === 2, "the refresh and the second socket");
    await publishTo(ch, pub, { i: 2 });
    await until(() => got.length === 2, "2 messages");
    expect(got.map((m) => m.seq)).toEqual([1, 2]);
    expect(errors).toEqual([]);
    sub.close();
  });

  it("sse: an anonymous stream ended at its longest lifetime resumes at once from its position, with no error", async () => {
    const ch = `public:client.${uniq()}`;
    const pub = (await mint({ sub: uniq(), channels: ["public:client.*"] })).access_token;
    const opened: { url: string; lastEventId: string | null }[] = [];
    const errors: unknown[] = [];
    const fg = new FloodgateClient({
      baseUrl: BASE,
      fetch: (i, init) => {
        if (i.includes("/v1/subscribe/"))
          opened.push({ url: i, lastEventId: new Headers(init?.headers).get("last-event-id") });
        return workerFetch(i, init);
      },
      sleep: async () => {
        throw new Error("no backoff expected");
      },
    });
    const got: Message[] = [];
    const sub = fg.subscribe(ch, (m) => got.push(m), { transport: "sse", onError: (e) => errors.push(e) });
    await until(() => sub.state === "live", "live");
    await publishTo(ch, pub, { i: 1 });
    await until(() => got.length === 1, "1 message");
    await relayTick(ch, Date.now() + SSE_ANONYMOUS_MAX_MS + 1_000);
    await until(() => opened.length === 2, "the second stream");
    expect(opened[1]?.lastEventId).toBe(`${sub.epoch}:1`);
    await publishTo(ch, pub, { i: 2 });
    await until(() => got.length === 2, "2 messages");
    expect(got.map((m) => m.seq)).toEqual([1, 2]);
    expect(errors).toEqual([]);
    sub.close();
  });
});
