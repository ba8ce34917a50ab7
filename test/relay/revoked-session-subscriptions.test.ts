/**
 * Subscriptions of a revoked session end (docs/security.md, "A revoked session ends"): a relay
 * holding a subscriber whose token carries a session reads the list of revoked sessions on its alarm
 * every 30 s, and ends those of a revoked one — a WebSocket with an `expired` frame (reason `session
 * revoked`, its position) and 4001, an SSE stream with `event: expired` — counted as `revoked`.
 * Anonymous subscribers and other sessions stay. Time is the relay's own `now` (its `tick`); nothing
 * sleeps.
 */
import { runInDurableObject } from "cloudflare:test";
import { describe, expect, it } from "vitest";
import { REVOCATION_CHECK_MS } from "../../src/relay/revocations";
import { SESSION_REVOKED_REASON, TOKEN_EXPIRED_CLOSE } from "../../src/wire/close-codes";
import { call, channelObject, freshIp, grown, mint, relayObject, scrapeMetrics, uniq, until } from "../support/helpers";
import { socket, sseText } from "../support/relay-fixtures";

const counted = (ch: string, ws: number, sse: number) =>
  until(
    () => runInDurableObject(relayObject(ch), (r) => r.counts().websockets === ws && r.counts().sse === sse),
    `${ws} sockets and ${sse} streams on ${ch}'s relay`,
  );

const closes = 'floodgate_subscriptions_closed_total{reason="revoked"}';

describe("subscriptions of a revoked session end", () => {
  it("WebSockets and SSE streams of the session end with `session revoked` within the check; anonymous ones and other sessions stay", async () => {
    const sub = uniq("rev");
    const id = uniq();
    const priv = `private:rev.${id}.x`;
    const pub = `public:rev.${id}`;
    const channels = [priv, pub];
    const pair = await mint({ sub, channels, scopes: ["subscribe"] });
    const other = await mint({ sub, channels, scopes: ["subscribe"] });
    await channelObject(pub).publishMany([
      { channel: pub, data: "1", publisher: "p", action: "deliver", now: Date.now() },
    ]);
    const privWs = await socket(priv, pair.access_token);
    const pubSse = await sseText(pub, pair.access_token);
    const pubWs = await socket(pub, pair.access_token);
    const anon = await socket(pub);
    const otherWs = await socket(pub, other.access_token);
    await counted(priv, 1, 0);
    await counted(pub, 3, 1);
    const before = await scrapeMetrics();

    // The refresh token used twice: its session is revoked.
    const refresh = () =>
      call("/v1/tokens/refresh", {
        method: "POST",
        headers: { "cf-connecting-ip": freshIp() },
        body: JSON.stringify({ refresh_token: pair.refresh_token }),
      });
    expect((await refresh()).status).toBe(200);
    expect((await refresh()).status).toBe(401);

    // Each relay reads it when its check is due.
    for (const ch of channels)
      await runInDurableObject(relayObject(ch), (r) => r.tick(Date.now() + REVOCATION_CHECK_MS));

    await until(() => privWs.closed() !== null && pubWs.closed() !== null && pubSse.state.ended, "the session's ends");
    for (const s of [privWs, pubWs]) {
      expect(s.closed()).toEqual({ code: TOKEN_EXPIRED_CLOSE, reason: SESSION_REVOKED_REASON });
      expect(s.frames.at(-1)).toMatchObject({ type: "expired", reason: SESSION_REVOKED_REASON });
    }
    expect(pubWs.frames.at(-1)).toEqual({
      type: "expired",
      reason: SESSION_REVOKED_REASON,
      epoch: (pubWs.frames[0] as { epoch: string }).epoch,
      seq: 1,
    });
    expect(pubSse.state.text).toMatch(/event: expired\ndata: \{[^\n]*"reason":"session revoked"[^\n]*\}\n\n$/);
    expect(anon.closed()).toBeNull();
    expect(otherWs.closed()).toBeNull();
    await counted(pub, 2, 0);
    await until(async () => (grown(before, await scrapeMetrics())[closes] ?? 0) >= 3, "3 closes counted as revoked");
    // A subscribe with the revoked session's token is refused.
    const again = await call(`/v1/subscribe/${priv}`, {
      headers: { accept: "text/event-stream", authorization: `Bearer ${pair.access_token}` },
    });
    expect(again.status).toBe(401);
    anon.ws.close();
    otherWs.ws.close();
  });

  it("a relay holding a session asks for the list within the check's period; one of anonymous subscribers never does", async () => {
    const ch = `public:rev.${uniq()}`;
    const anon = await socket(ch);
    await counted(ch, 1, 0);
    expect(await runInDurableObject(relayObject(ch), (_r, state) => state.storage.getAlarm())).toBeNull();
    const pair = await mint({ sub: uniq("rev"), channels: [ch], scopes: ["subscribe"] });
    const joined = Date.now();
    const signed = await socket(ch, pair.access_token);
    await counted(ch, 2, 0);
    const alarm = await runInDurableObject(relayObject(ch), (_r, state) => state.storage.getAlarm());
    expect(alarm as number).toBeGreaterThanOrEqual(joined);
    expect(alarm as number).toBeLessThanOrEqual(Date.now() + REVOCATION_CHECK_MS);
    anon.ws.close();
    signed.ws.close();
  });
});
