/** Resume after a disconnect: `?after=` (WebSocket, SSE) and `Last-Event-ID` (SSE). */
import { describe, expect, it } from "vitest";
import { closeAndWaitTold } from "../support/closes-told";
import { call, mint, openSocket, publishTo, readSse, seqOf, uniq } from "../support/helpers";

describe("resume", () => {
  it("a WebSocket that reconnects with ?after= gets exactly what it missed, then live", async () => {
    const ch = `public:resume.${uniq()}`;
    const t = (await mint({ sub: uniq(), channels: ["public:resume.*"] })).access_token;
    const first = await openSocket(ch);
    for (let i = 1; i <= 3; i++) await publishTo(ch, t, i);
    const seen = await first.next(3);
    first.ws.close();
    for (let i = 4; i <= 6; i++) await publishTo(ch, t, i);
    const last = seen[seen.length - 1]?.seq ?? 0;
    const second = await openSocket(ch, `?after=${last}`);
    await publishTo(ch, t, 7);
    const rest = await second.next(4);
    const all = [...seen, ...rest];
    expect(all.map((f) => f.seq)).toEqual([1, 2, 3, 4, 5, 6, 7]);
    expect(all.map((f) => f.data)).toEqual([1, 2, 3, 4, 5, 6, 7]);
    await closeAndWaitTold(ch, () => second.ws.close());
  });

  it("an SSE stream resumes from Last-Event-ID, and ?after= wins over it", async () => {
    const ch = `public:resume.${uniq()}`;
    const t = (await mint({ sub: uniq(), channels: ["public:resume.*"] })).access_token;
    for (let i = 1; i <= 5; i++) await publishTo(ch, t, i);
    const res = await call(`/v1/subscribe/${ch}`, { headers: { accept: "text/event-stream", "last-event-id": "2" } });
    const reading = readSse(res, 4);
    await publishTo(ch, t, 6);
    expect((await reading).map((e) => seqOf(e.id))).toEqual([3, 4, 5, 6]);
    const res2 = await call(`/v1/subscribe/${ch}?after=5`, {
      headers: { accept: "text/event-stream", "last-event-id": "1" },
    });
    // Read until its first event, then cancelled.
    const reading2 = await closeAndWaitTold(ch, () => readSse(res2, 1));
    expect(reading2.map((e) => seqOf(e.id))).toEqual([6]);
  });

  it("resume from 0 replays everything retained; a bad after is a 400", async () => {
    const ch = `public:resume.${uniq()}`;
    const t = (await mint({ sub: uniq(), channels: ["public:resume.*"] })).access_token;
    for (let i = 1; i <= 3; i++) await publishTo(ch, t, i);
    const s = await openSocket(ch, "?after=0");
    expect((await s.next(3)).map((f) => f.seq)).toEqual([1, 2, 3]);
    await closeAndWaitTold(ch, () => s.ws.close());
    const bad = await call(`/v1/subscribe/${ch}?after=abc`, { headers: { upgrade: "websocket" } });
    expect(bad.status).toBe(400);
  });
});
