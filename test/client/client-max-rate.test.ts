/**
 * The TypeScript client's `maxRate` (docs/client.md): it asks for `?max_rate=` over WebSocket and
 * SSE alike, messages still reach `onMessage` in seq order (with gaps), and what the subscription
 * skipped reaches `onSkipped`, apart from the channel's summaries of drops (`onSummary`).
 */
import { exports } from "cloudflare:workers";
import { FloodgateClient, type Message, type SkippedSummary, type SocketLike, type Summary } from "@floodgate/client";
import { describe, expect, it } from "vitest";
import { BASE, uniq, until } from "../support/helpers";
import { publishDirect, readerSocket, relayClock } from "../support/reader-fixtures";

const workerFetch = (input: string, init?: RequestInit) => exports.default.fetch(new Request(input, init));

async function openWebSocket(url: string, protocols: string[]): Promise<SocketLike> {
  const res = await exports.default.fetch(
    new Request(url.replace(/^ws/, "http"), {
      headers: { upgrade: "websocket", "sec-websocket-protocol": protocols.join(", ") },
    }),
  );
  if (res.status !== 101 || !res.webSocket) throw new Error(`upgrade failed: ${res.status}`);
  res.webSocket.accept();
  return res.webSocket as unknown as SocketLike;
}

describe("client maxRate", () => {
  for (const transport of ["websocket", "sse"] as const) {
    it(`${transport}: takes at most its rate and hears what it skipped through onSkipped`, async () => {
      const ch = `public:client.${uniq()}`;
      const clock = await relayClock(ch);
      const all = await readerSocket(ch);
      const fg = new FloodgateClient({ baseUrl: BASE, fetch: workerFetch, openWebSocket, sleep: async () => {} });
      const got: Message[] = [];
      const skipped: SkippedSummary[] = [];
      const drops: Summary[] = [];
      const sub = fg.subscribe(ch, (m) => got.push(m), {
        transport,
        maxRate: "1/s",
        onSkipped: (s) => skipped.push(s),
        onSummary: (s) => drops.push(s),
      });
      await sub.ready;
      for (let i = 0; i < 5; i++) {
        await publishDirect(ch, { i });
        await until(() => all.messages.length === i + 1, `message ${i}`);
      }
      await until(() => got.length === 1, "its one message");
      clock.at += 2 * 3_600_000;
      await clock.tick();
      await until(() => skipped.length === 1, "its summary");
      expect(got.map((m) => m.seq)).toEqual([1]);
      expect(skipped[0]).toMatchObject({ type: "summary", scope: "subscriber", channel: ch, skipped: 4 });
      expect(drops).toEqual([]);
      sub.close();
      all.ws.close();
    });
  }
});
