/** The publish batcher on its own: order, one call per batch, and no resend when an answer is lost. */
import { describe, expect, it, vi } from "vitest";
import { TAKEOVER_MS } from "../../functions/coalescer";
import type { PublishCommand, PublishOutcome } from "../../src/channel/calls";
import { ApiError } from "../../src/worker/http/errors";
import { PUBLISH_BATCHING, PublishBatcher } from "../../src/worker/publish-batcher";

const cmd = (i: number): PublishCommand => ({
  channel: "public:a.b",
  data: `{"i":${i}}`,
  publisher: "p",
  action: "deliver",
  now: i,
});

describe("publish batcher", () => {
  it("sends publishes of one tick as one call, in order, and answers each with its own outcome", async () => {
    const sent: number[][] = [];
    const b = new PublishBatcher(async (_ch, cmds) => {
      sent.push(cmds.map((c) => c.now));
      return cmds.map(
        (c, k) =>
          ({
            status: "delivered",
            channel: c.channel,
            seq: 100 + k,
            id: `m${c.now}`,
            published_at: c.now,
            replayed: false,
          }) as PublishOutcome,
      );
    });
    const outcomes = await Promise.all([0, 1, 2, 3].map((i) => b.publish(cmd(i))));
    expect(sent).toEqual([[0, 1, 2, 3]]);
    expect(outcomes.map((o) => (o as { id: string }).id)).toEqual(["m0", "m1", "m2", "m3"]);
    expect(b.calls).toBe(1);
  });

  it("followers of a batch whose answer never comes fail after their patience and are never resent", async () => {
    vi.useFakeTimers();
    try {
      let calls = 0;
      const b = new PublishBatcher(() => {
        calls++;
        return new Promise<never>(() => {}); // the call is lost
      });
      void b.publish(cmd(0)).catch(() => {});
      const followers = [1, 2, 3].map((i) =>
        b.publish(cmd(i)).then(
          () => "answered",
          (e: Error) => e.message,
        ),
      );
      await vi.advanceTimersByTimeAsync(PUBLISH_BATCHING.patienceMs + 50);
      expect(await Promise.all(followers)).toEqual(Array(3).fill("publish batch got no answer"));
      expect(calls).toBe(1);
    } finally {
      vi.useRealTimers();
    }
  });
});

describe("batches in the channel object", () => {
  it("keep exactly HISTORY_LIMIT messages, with counters that are right and stored", async () => {
    const { env } = await import("cloudflare:workers");
    const ch = `public:batch.trim${crypto.randomUUID().slice(0, 8)}`;
    const stub = env.CHANNEL.get(env.CHANNEL.idFromName(ch));
    // 4 batches through publishMany (50, 50, 50, 30): 180 > 100 kept.
    for (const [start, n] of [
      [0, 50],
      [50, 50],
      [100, 50],
      [150, 30],
    ] as const) {
      await stub.publishMany(
        Array.from({ length: n }, (_, i) => ({ ...cmd(start + i), channel: ch, now: Date.now() })),
      );
    }
    const history = (await stub.history(0, 1000)).map((f) => JSON.parse(f) as { seq: number; data: { i: number } });
    expect(history.map((f) => f.seq)).toEqual(Array.from({ length: 100 }, (_, i) => 81 + i));
    expect(history.map((f) => f.data.i)).toEqual(Array.from({ length: 100 }, (_, i) => 80 + i));
    expect(await stub.stats()).toMatchObject({ last_seq: 180, delivered_total: 180 });
    // The counters were stored, not only held in memory: a fresh instance reads the same.
    const { evictDurableObject } = await import("cloudflare:test");
    await evictDurableObject(stub);
    expect(await env.CHANNEL.get(env.CHANNEL.idFromName(ch)).stats()).toMatchObject({
      last_seq: 180,
      delivered_total: 180,
    });
  });

  it("write the counters in one statement per batch, not one per message", async () => {
    const { env } = await import("cloudflare:workers");
    const { runInDurableObject } = await import("cloudflare:test");
    const ch = `public:batch.writes${crypto.randomUUID().slice(0, 8)}`;
    const stub = env.CHANNEL.get(env.CHANNEL.idFromName(ch));
    await stub.publishMany([{ ...cmd(0), channel: ch, now: Date.now() }]); // the first publish stores the name
    const counterWrites = await runInDurableObject(stub, async (instance, state) => {
      // Count the statements that write the counters table while one batch of 50 is applied.
      const sql = state.storage.sql;
      const exec = sql.exec.bind(sql);
      let writes = 0;
      sql.exec = ((query: string, ...bindings: SqlStorageValue[]) => {
        if (/INTO counters/.test(query)) writes++;
        return exec(query, ...bindings);
      }) as typeof sql.exec;
      try {
        await instance.publishMany(
          Array.from({ length: 50 }, (_, i) => ({ ...cmd(1 + i), channel: ch, now: Date.now() })),
        );
      } finally {
        sql.exec = exec;
      }
      return writes;
    });
    expect(counterWrites).toBe(1);
    expect(await stub.stats()).toMatchObject({ last_seq: 51, delivered_total: 51 });
  });
});

describe("a batch leader whose request dies before it sends", () => {
  it("is taken over by a follower within TAKEOVER_MS: every publish is answered once, in order, none lost", async () => {
    vi.useFakeTimers();
    try {
      const sent: number[][] = [];
      const b = new PublishBatcher(async (_ch, cmds) => {
        sent.push(cmds.map((c) => c.now));
        return cmds.map(
          (c) =>
            ({
              status: "delivered",
              channel: c.channel,
              seq: c.now + 1,
              id: `m${c.now}`,
              published_at: c.now,
              replayed: false,
            }) as PublishOutcome,
        );
      });
      // The leader's request is gone: the timers it sets never fire, so on its own it never sends.
      const realSetTimeout = globalThis.setTimeout;
      globalThis.setTimeout = (() => 0) as unknown as typeof setTimeout;
      let leader: Promise<PublishOutcome>;
      try {
        leader = b.publish(cmd(0));
      } finally {
        globalThis.setTimeout = realSetTimeout;
      }
      void leader.catch(() => {});
      const followers = [1, 2, 3].map((i) =>
        b.publish(cmd(i)).then(
          (o) => (o as { id: string }).id,
          (e: Error) => e.message,
        ),
      );
      await vi.advanceTimersByTimeAsync(TAKEOVER_MS + 50);
      expect(await Promise.all(followers)).toEqual(["m1", "m2", "m3"]);
      // The dead leader's message went out with them, once: nothing accepted is lost or doubled.
      expect(sent).toEqual([[0, 1, 2, 3]]);
      // And the channel's lane is free: the next publish goes straight through.
      const next = b.publish(cmd(4));
      await vi.advanceTimersByTimeAsync(10);
      expect(((await next) as { id: string }).id).toBe("m4");
      expect(b.calls).toBe(2);
    } finally {
      vi.useRealTimers();
    }
  });
});

describe("byte cap on waiting publishes", () => {
  it("refuses a publish past the cap with 503 unavailable and Retry-After, counts it, and frees the bytes on answer", async () => {
    let release = false;
    let overflows = 0;
    const b = new PublishBatcher(
      async (_ch, cmds) => {
        while (!release) await new Promise((r) => setTimeout(r, 1));
        return cmds.map(
          (c) =>
            ({
              status: "delivered",
              channel: c.channel,
              seq: c.now,
              id: `m${c.now}`,
              published_at: c.now,
              replayed: false,
            }) as PublishOutcome,
        );
      },
      { maxBytes: 10_000, onOverflow: () => overflows++ },
    );
    const big = (i: number): PublishCommand => ({ ...cmd(i), data: JSON.stringify("x".repeat(3000)) });
    const waiting = [0, 1, 2].map((i) => b.publish(big(i)));
    const refused = await b.publish(big(3)).then(
      () => null,
      (e: ApiError) => e,
    );
    expect(refused).toBeInstanceOf(ApiError);
    expect(refused?.status).toBe(503);
    expect(refused?.toBody().code).toBe("unavailable");
    expect(refused?.headers["retry-after"]).toBe("1");
    expect(overflows).toBe(1);
    release = true;
    expect((await Promise.all(waiting)).map((o) => (o as { id: string }).id)).toEqual(["m0", "m1", "m2"]);
    expect(b.queuedBytes).toBe(0);
    expect(((await b.publish(big(4))) as { id: string }).id).toBe("m4");
  });
});
