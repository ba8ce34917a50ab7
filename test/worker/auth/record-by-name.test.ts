/**
 * The record's channel is granted by name only (docs/security.md, "The analytics channel"): a token
 * whose patterns match ANALYTICS_CHANNEL only through a wildcard reads other channels but is refused
 * the record's — subscribe (WebSocket and SSE), history, presence and Pusher auth — while a token
 * naming it literally reads it. Each test uses an analytics channel of its own (a custom env).
 */
import { describe, expect, it } from "vitest";
import { callAndWait, envWith, freshIp, mint, uniq } from "../../support/helpers";

/** A request to the Worker with `e`, from a fresh IP (each read takes from its IP's budget). */
function get(path: string, e: Env, headers: Record<string, string> = {}): Promise<Response> {
  return callAndWait(path, { headers: { "cf-connecting-ip": freshIp(), ...headers } }, e);
}

const bearer = (token: string) => ({ authorization: `Bearer ${token}` });

describe("the analytics channel needs its literal name in the token", () => {
  it("wildcards that match it answer 403 on subscribe, history and presence; the literal name reads it", async () => {
    const area = uniq("rec");
    const name = `private:${area}.analytics.dropped`;
    const e = envWith({ ANALYTICS_CHANNEL: name });
    // Each wildcard with a channel it still grants.
    const wildcards: [string, string][] = [
      ["private:*.*.*", `private:${area}.a.b`],
      [`private:${area}.analytics.**`, `private:${area}.analytics.other`],
      [`private:${area}.*.dropped`, `private:${area}.archive.dropped`],
    ];
    const literal = (await mint({ sub: uniq("a"), channels: [name], scopes: ["subscribe"] })).access_token;
    for (const [pattern, other] of wildcards) {
      const token = (await mint({ sub: uniq("w"), channels: [pattern], scopes: ["subscribe"] })).access_token;
      for (const path of [`/v1/history/${name}`, `/v1/presence/${name}`]) {
        const res = await get(path, e, bearer(token));
        expect(res.status, path).toBe(403);
        const body = (await res.json()) as { code: string; msg: string };
        expect(body.code).toBe("permission_denied");
        expect(body.msg).toContain("literal name");
      }
      const ws = await get(`/v1/subscribe/${name}`, e, { ...bearer(token), upgrade: "websocket" });
      expect(ws.status).toBe(403);
      const sse = await get(`/v1/subscribe/${name}`, e, { ...bearer(token), accept: "text/event-stream" });
      expect(sse.status).toBe(403);
      // The same wildcard still grants the channels it was meant for.
      expect((await get(`/v1/history/${other}`, e, bearer(token))).status).toBe(200);
    }
    expect((await get(`/v1/history/${name}`, e, bearer(literal))).status).toBe(200);
    expect((await get(`/v1/presence/${name}`, e, bearer(literal))).status).toBe(200);
    const ws = await get(`/v1/subscribe/${name}`, e, { ...bearer(literal), upgrade: "websocket" });
    expect(ws.status).toBe(101);
    ws.webSocket?.accept();
    ws.webSocket?.close();
  });

  it("Pusher auth refuses a wildcard for a Pusher-named analytics channel and signs for its literal name", async () => {
    const pusherName = `private-${uniq("rec")}.dropped`;
    const e = envWith({ ANALYTICS_CHANNEL: `pusher:${pusherName}` });
    const auth = (token: string) =>
      callAndWait(
        "/v1/pusher/auth",
        {
          method: "POST",
          headers: { ...bearer(token), "content-type": "application/x-www-form-urlencoded" },
          body: `socket_id=123.456&channel_name=${pusherName}`,
        },
        e,
      );
    const wildcard = (await mint({ sub: uniq("w"), channels: ["pusher:**"], scopes: ["subscribe"] })).access_token;
    const refused = await auth(wildcard);
    expect(refused.status).toBe(403);
    expect(((await refused.json()) as { code: string }).code).toBe("permission_denied");
    const literal = (await mint({ sub: uniq("a"), channels: [`pusher:${pusherName}`], scopes: ["subscribe"] }))
      .access_token;
    const signed = await auth(literal);
    expect(signed.status).toBe(200);
    expect(((await signed.json()) as { auth: string }).auth).toMatch(/^[^:]+:[0-9a-f]{64}$/);
  });
});
