/**
 * Every subscription Floodgate ends is counted by reason (docs/operations.md, "Metrics"):
 * `floodgate_subscriptions_closed_total{reason}` grows by each WebSocket closed and each SSE stream
 * ended for a history gap (4009), an internal failure (1011) and expiry (4001), counted in the relays'
 * own isolates and flushed to the metrics object. Slowness (4008) comes only after thinning: its
 * count is checked with it (test/relay/slow-readers.test.ts).
 */
import { runInDurableObject } from "cloudflare:test";
import { describe, expect, it } from "vitest";
import { Relay } from "../../src/relay/relay";
import {
  call,
  grown,
  mint,
  openSocket,
  publisher,
  publishTo,
  relayObject,
  scrapeMetrics,
  uniq,
  until,
  withFailing,
} from "../support/helpers";
import { closed } from "../support/relay-fixtures";

const closes = (reason: string) => `floodgate_subscriptions_closed_total{reason="${reason}"}`;

/** Waits until the closes of `reason` grew by `n` since `before` (relays flush on their own time). */
async function closedBy(before: Record<string, number>, reason: string, n: number): Promise<void> {
  let seen = 0;
  await until(async () => {
    seen = grown(before, await scrapeMetrics())[closes(reason)] ?? 0;
    return seen >= n;
  }, `${n} closes for ${reason}`);
  // Settled: no more than that (nothing counted twice).
  expect(grown(before, await scrapeMetrics())[closes(reason)]).toBe(n);
}

describe("subscriptions closed, counted by reason", () => {
  it("history_gap: subscribers of a relay that missed what history no longer holds", async () => {
    const ch = `public:closes.${uniq()}`;
    const t = await publisher("public:closes.*");
    const subs = [await openSocket(ch), await openSocket(ch)];
    const done = subs.map((s) => closed(s.ws));
    expect((await publishTo(ch, t, 0)).status).toBe(200);
    for (const s of subs) await s.next(1);
    const before = await scrapeMetrics();
    await withFailing(Relay, "deliver", "relay aborted", async () => {
      for (let i = 1; i <= 110; i++) expect((await publishTo(ch, t, i)).status).toBe(200);
    });
    expect((await publishTo(ch, t, 111)).status).toBe(200);
    for (const d of done) expect(await d).toMatchObject({ code: 4009 });
    await closedBy(before, "history_gap", 2);
  });

  it("internal: a socket whose send fails", async () => {
    const ch = `public:closes.${uniq()}`;
    const t = await publisher("public:closes.*");
    const a = await openSocket(ch);
    const [failing] = await runInDurableObject(relayObject(ch), (_r, state) => state.getWebSockets());
    const b = await openSocket(ch);
    const aClosed = closed(a.ws);
    const before = await scrapeMetrics();
    await withFailing(
      WebSocket,
      "send",
      "send failed: peer reset",
      async () => {
        expect((await publishTo(ch, t, 1)).status).toBe(200);
        expect((await publishTo(ch, t, 2)).status).toBe(200);
        await b.next(2);
      },
      (socket) => socket === (failing as unknown as Record<string, unknown>),
    );
    expect(await aClosed).toMatchObject({ code: 1011 });
    await closedBy(before, "internal", 1);
  });

  it("expired: a WebSocket and an SSE stream whose token expired; an anonymous one is not counted", async () => {
    const ch = `public:closes.${uniq()}`;
    const pair = await mint({ sub: uniq(), channels: ["public:closes.*"] });
    const exp = pair.expires_at * 1000;
    const auth = { authorization: `Bearer ${pair.access_token}` };
    const ws = (await call(`/v1/subscribe/${ch}`, { headers: { ...auth, upgrade: "websocket" } })).webSocket;
    if (!ws) throw new Error("no socket");
    ws.accept();
    const done = closed(ws);
    const stream = await call(`/v1/subscribe/${ch}`, { headers: { ...auth, accept: "text/event-stream" } });
    const text = stream.text();
    const anon = await openSocket(ch);
    await until(
      () => runInDurableObject(relayObject(ch), (relay) => relay.counts().websockets === 2 && relay.counts().sse === 1),
      "three subscribers on the relay",
    );
    const before = await scrapeMetrics();
    await runInDurableObject(relayObject(ch), (relay) => relay.tick(exp));
    expect(await done).toMatchObject({ code: 4001 });
    expect(await text).toContain("event: expired");
    await closedBy(before, "expired", 2);
    anon.ws.close();
  });
});
