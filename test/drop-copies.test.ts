import { describe, expect, it } from "vitest";
import type { DroppedCopy } from "../functions/before-publish";
import { DropCopyQueue, type QueuedCopy, serialiseCopy } from "../functions/drop-copies";

const copy = (i: number): DroppedCopy => ({
  source_channel: "public:a.b",
  message: { i },
  publisher: "alice",
  drop_rate: 0.5,
  dropped_at: 1000 + i,
});

describe("drop copy queue", () => {
  it("sends copies enqueued together in batches of at most maxBatch", async () => {
    const batches: QueuedCopy[][] = [];
    const q = new DropCopyQueue({
      sink: { send: async (b) => void batches.push(b) },
      onFailure: () => {},
      maxBatch: 100,
      windowMs: 1,
    });
    await Promise.all(Array.from({ length: 1000 }, (_, i) => q.enqueue({ copy: copy(i), counted: false })));
    expect(batches.length).toBeLessThanOrEqual(10);
    expect(batches.every((b) => b.length <= 100)).toBe(true);
    expect(batches.flat().map((c) => (c.copy.message as { i: number }).i)).toEqual(
      Array.from({ length: 1000 }, (_, i) => i),
    );
    expect(q.size).toBe(0);
  });

  it("copies dropped while a batch is being sent fill the next batch, sent once the first is done", async () => {
    const batches: number[][] = [];
    let inFlight = 0;
    let release!: () => void;
    const q = new DropCopyQueue({
      sink: {
        send: async (b) => {
          inFlight++;
          expect(inFlight).toBe(1); // one send at a time, in order
          batches.push(b.map((c) => (c.copy.message as { i: number }).i));
          if (batches.length === 1) await new Promise<void>((r) => (release = r));
          inFlight--;
        },
      },
      onFailure: () => {},
      windowMs: 0,
    });
    const first = q.enqueue({ copy: copy(0), counted: false });
    await new Promise((r) => setTimeout(r, 1)); // the first batch is now being sent
    const rest = Array.from({ length: 30 }, (_, i) => q.enqueue({ copy: copy(i + 1), counted: false }));
    expect(q.size).toBe(30);
    release();
    await Promise.all([first, ...rest]);
    expect(batches).toEqual([[0], Array.from({ length: 30 }, (_, i) => i + 1)]);
    expect(q.size).toBe(0);
  });

  it("bounds memory: beyond maxQueued a copy is reported as failed at once instead of queued", async () => {
    let release!: () => void;
    const sent: number[] = [];
    const failed: number[] = [];
    const q = new DropCopyQueue({
      sink: {
        send: async (b) => {
          await new Promise<void>((r) => (release = r)); // the analytics channel is stalled
          sent.push(...b.map((c) => (c.copy.message as { i: number }).i));
        },
      },
      onFailure: (b) => void failed.push(...b.map((c) => (c.copy.message as { i: number }).i)),
      windowMs: 0,
      maxQueued: 3,
    });
    const queued = [0, 1, 2].map((i) => q.enqueue({ copy: copy(i), counted: false }));
    await q.enqueue({ copy: copy(3), counted: false }); // settles at once: reported, not queued
    expect(failed).toEqual([3]);
    expect(q.size).toBeLessThanOrEqual(3);
    release();
    await Promise.all(queued);
    expect(sent).toEqual([0, 1, 2]);
  });

  it("a failed batch is reported, not thrown, and later batches still go", async () => {
    const failed: number[] = [];
    const sent: number[] = [];
    let calls = 0;
    const q = new DropCopyQueue({
      sink: {
        send: async (b) => {
          calls++;
          if (calls === 1) throw new Error("analytics down");
          sent.push(b.length);
        },
      },
      onFailure: (b) => {
        failed.push(b.length);
      },
      maxBatch: 3,
      windowMs: 0,
    });
    await Promise.all(Array.from({ length: 7 }, (_, i) => q.enqueue({ copy: copy(i), counted: false })));
    expect(failed).toEqual([3]);
    expect(sent).toEqual([3, 1]);
  });

  it("waits for an async failure handler before the copy's promise settles", async () => {
    const order: string[] = [];
    const q = new DropCopyQueue({
      sink: {
        send: async () => {
          throw new Error("down");
        },
      },
      onFailure: async () => {
        await new Promise((r) => setTimeout(r, 5));
        order.push("failure handled");
      },
      windowMs: 0,
    });
    await q.enqueue({ copy: copy(1), counted: false });
    order.push("enqueue settled");
    expect(order).toEqual(["failure handled", "enqueue settled"]);
  });

  it("a copy enqueued after a flush drained starts a new flush (none is stranded)", async () => {
    const sent: number[] = [];
    const q = new DropCopyQueue({
      sink: { send: async (b) => void sent.push(b.length) },
      onFailure: () => {},
      windowMs: 0,
    });
    await q.enqueue({ copy: copy(1), counted: false });
    await q.enqueue({ copy: copy(2), counted: false });
    expect(sent).toEqual([1, 1]);
    expect(q.size).toBe(0);
  });

  it("serialises a copy with the message text exactly as sent", () => {
    const text = serialiseCopy({ copy: copy(1), counted: false, messageJson: '{"n":12345678901234567890}' });
    expect(text).toContain('"message":{"n":12345678901234567890}');
    expect(JSON.parse(text)).toMatchObject({
      source_channel: "public:a.b",
      publisher: "alice",
      drop_rate: 0.5,
      dropped_at: 1001,
    });
  });
});
