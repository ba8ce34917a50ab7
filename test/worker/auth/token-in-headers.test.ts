/**
 * Tokens kept out of URLs (docs/security.md): SSE takes Authorization: Bearer, a browser WebSocket the
 * bearer.<token> subprotocol, and the client never puts its token in a URL.
 */
import { env } from "cloudflare:workers";
import { FloodgateClient, type Message, type SocketLike } from "@floodgate/client";
import { describe, expect, it } from "vitest";
import { BASE, callAndWait, freshIp, publishTo, readSse, uniq, untilUnsubscribed } from "../../support/helpers";
import { accessToken, sse, ws } from "../../support/raw-requests";

describe("tokens out of URLs", () => {
  it("SSE takes the token from Authorization: Bearer", async () => {
    const ch = `private:bound.x.${uniq()}`;
    const token = await accessToken(uniq("sse"));
    expect((await sse(env, ch, { "cf-connecting-ip": freshIp() })).status).toBe(401);
    const res = await sse(env, ch, { authorization: `Bearer ${token}` });
    expect(res.status).toBe(200);
    expect((await publishTo(ch, token, { via: "header" })).status).toBe(200);
    const [event] = await readSse(res, 1);
    expect(event?.data).toMatchObject({ channel: ch, data: { via: "header" } });
  });

  it("a browser WebSocket sends the token as the bearer.<token> subprotocol and gets floodgate back", async () => {
    const ch = `private:bound.x.${uniq()}`;
    const token = await accessToken(uniq("ws"));
    const res = await ws(env, ch, { "sec-websocket-protocol": `floodgate, bearer.${token}` });
    expect(res.status).toBe(101);
    expect(res.headers.get("sec-websocket-protocol")).toBe("floodgate");
    const socket = res.webSocket as WebSocket;
    socket.accept();
    const got = new Promise<string>((resolve) =>
      socket.addEventListener("message", (ev) => resolve(ev.data as string)),
    );
    expect((await publishTo(ch, token, { via: "subprotocol" })).status).toBe(200);
    expect(JSON.parse(await got)).toMatchObject({ data: { via: "subprotocol" } });
    socket.close();
    // Without the token, with a bad one, or without the floodgate protocol to answer with: refused.
    const ip = freshIp();
    expect((await ws(env, ch, { "sec-websocket-protocol": "floodgate", "cf-connecting-ip": ip })).status).toBe(401);
    expect(
      (await ws(env, ch, { "sec-websocket-protocol": "floodgate, bearer.x.y.z", "cf-connecting-ip": ip })).status,
    ).toBe(401);
    const noProtocol = await ws(env, ch, { "sec-websocket-protocol": `bearer.${token}`, "cf-connecting-ip": ip });
    expect(noProtocol.status).toBe(400);
    expect(await noProtocol.json()).toMatchObject({ msg: expect.stringContaining('"floodgate"') });
  });

  it("the client sends its token in a header or subprotocol, never in the URL", async () => {
    const ch = `private:bound.x.${uniq()}`;
    const token = await accessToken(uniq("client"));
    const urls: string[] = [];
    const protocolsSeen: string[][] = [];
    const workerFetch = (input: string, init?: RequestInit) => {
      urls.push(input);
      return callAndWait(input.slice(BASE.length), init);
    };
    const open = async (url: string, protocols: string[]): Promise<SocketLike> => {
      urls.push(url);
      protocolsSeen.push(protocols);
      const res = await callAndWait(url.replace(/^ws/, "http").slice(BASE.length), {
        headers: { upgrade: "websocket", "sec-websocket-protocol": protocols.join(", ") },
      });
      if (res.status !== 101 || !res.webSocket) throw new Error(`upgrade failed: ${res.status}`);
      res.webSocket.accept();
      return res.webSocket as unknown as SocketLike;
    };
    for (const transport of ["websocket", "sse"] as const) {
      const fg = new FloodgateClient({ baseUrl: BASE, accessToken: token, fetch: workerFetch, openWebSocket: open });
      const got: Message[] = [];
      const sub = fg.subscribe(ch, (m) => got.push(m), { transport, after: 0 });
      for (let i = 0; i < 300 && got.length === 0; i++) {
        if (i % 20 === 0) await publishTo(ch, token, { transport });
        await new Promise((r) => setTimeout(r, 10));
      }
      sub.close();
      expect(got.length).toBeGreaterThan(0);
    }
    await untilUnsubscribed(ch);
    expect(urls.length).toBeGreaterThanOrEqual(2);
    for (const url of urls) expect(url).not.toContain(token);
    expect(protocolsSeen[0]).toEqual(["floodgate", `bearer.${token}`]);
  });
});
