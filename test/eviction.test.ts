/** Hibernation: after the channel object is evicted, its sockets still receive and seq continues. */

import { evictDurableObject, runInDurableObject } from "cloudflare:test";
import { env } from "cloudflare:workers";
import { describe, expect, it } from "vitest";
import { mint, openSocket, publishTo, uniq } from "./helpers";

describe("eviction", () => {
  it("hibernated WebSockets keep receiving after eviction, without a gap in seq", async () => {
    const ch = `public:evict.${uniq()}`;
    const t = (await mint({ sub: uniq(), channels: ["public:evict.*"] })).access_token;
    const sub = await openSocket(ch);
    await publishTo(ch, t, "before");
    await sub.next(1);
    const stub = env.CHANNEL.get(env.CHANNEL.idFromName(ch));
    await evictDurableObject(stub);
    await publishTo(ch, t, "after");
    const frames = await sub.next(2);
    expect(frames.map((f) => [f.seq, f.data])).toEqual([
      [1, "before"],
      [2, "after"],
    ]);
    // The counters came back from storage, not from memory.
    const stats = await runInDurableObject(stub, (instance) => instance.stats());
    expect(stats).toMatchObject({ delivered_total: 2, last_seq: 2, websockets: 1 });
    sub.ws.close();
  });

  it("a socket whose send fails is dropped without disturbing the others", async () => {
    const ch = `public:evict.${uniq()}`;
    const t = (await mint({ sub: uniq(), channels: ["public:evict.*"] })).access_token;
    const a = await openSocket(ch);
    const b = await openSocket(ch);
    a.ws.close();
    await publishTo(ch, t, 1);
    await publishTo(ch, t, 2);
    expect((await b.next(2)).map((f) => f.data)).toEqual([1, 2]);
    b.ws.close();
  });
});
