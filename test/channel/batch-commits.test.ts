/**
 * How the channel object commits a batch of publishes: exactly HISTORY_LIMIT messages kept, counters
 * right and written in one statement per batch; a batch that fails mid-way rolls memory back with
 * storage (no ghost frames, seq continues), and the channel's alarm survives it.
 */
import { runInDurableObject } from "cloudflare:test";
import { describe, expect, it } from "vitest";
import type { PublishCommand } from "../../src/channel/calls";
import { counter, withFailingAppend } from "../support/channel-internals";
import { channelStats, channelObject as channelStub, openSocket, publisher, publishTo, uniq } from "../support/helpers";

/** A publish of `data` (any JSON value) as the Worker sends it to the channel's object. */
function deliverCommand(ch: string, data: unknown) {
  return { channel: ch, data: JSON.stringify(data), publisher: "p", action: "deliver" as const, now: Date.now() };
}

/**
 * One batch of publishes whose second append fails with SQLITE_FULL, after the first was appended:
 * answers the error message the call got (or "answered" if it did not fail).
 */
function publishManyFailingMidway(ch: string, messages: unknown[]): Promise<string> {
  let appends = 0;
  return withFailingAppend(
    "SQLITE_FULL: database or disk is full",
    () =>
      channelStub(ch)
        .publishMany(messages.map((m) => deliverCommand(ch, m)))
        .then(
          () => "answered",
          (e: Error) => e.message,
        ),
    () => ++appends === 2,
  );
}

const cmd = (i: number): PublishCommand => ({
  channel: "public:a.b",
  data: `{"i":${i}}`,
  publisher: "p",
  action: "deliver",
  now: i,
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

describe("a batch that fails mid-way", () => {
  it("rolls back memory with storage: no ghost frames, no counted messages, seq continues where it was", async () => {
    const ch = `public:bounds.${uniq()}`;
    const t = await publisher("public:bounds.*");
    const sub = await openSocket(ch);
    expect((await publishTo(ch, t, "first")).status).toBe(200);
    await sub.next(1);
    const failed = await publishManyFailingMidway(ch, ["a", "b", "c"]);
    expect(failed).toMatch(/SQLITE_FULL/);
    expect((await publishTo(ch, t, "after")).status).toBe(200);
    const frames = await sub.next(2);
    expect(frames.map((f) => [f.seq, f.data])).toEqual([
      [1, "first"],
      [2, "after"],
    ]);
    expect(await channelStats(ch)).toMatchObject({ last_seq: 2, delivered_total: 2 });
    sub.ws.close();
  });
});

describe("a failed batch and the alarm", () => {
  it("a channel's alarm survives a batch that fails: the fast loop and the idle expiry still get one", async () => {
    // A channel with a target (test config: public:fastloop.*): its first traffic asks for the fast
    // loop's alarm inside the batch's transaction, which the failure undoes.
    const ch = `public:fastloop.${uniq()}`;
    const failed = await publishManyFailingMidway(ch, ["a", "b"]);
    expect(failed).toMatch(/SQLITE_FULL/);
    await channelStub(ch).publishMany([deliverCommand(ch, "c")]);
    const { alarm, due } = await runInDurableObject(channelStub(ch), async (instance, state) => ({
      alarm: await state.storage.getAlarm(),
      due: counter(instance, "fast_due_at"),
    }));
    expect(due).toBeGreaterThan(0);
    expect(alarm).not.toBeNull();
    expect(alarm as number).toBeLessThanOrEqual(due);
  });
});
