import { describe, expect, it, vi } from "vitest";
import {
  CopyTally,
  copyBytes,
  DropCopyQueue,
  type FailureCause,
  OverflowLog,
  type QueuedCopy,
  serialiseCopy,
} from "../../functions/drop-copies";

const copy = (i: number, message = `{"i":${i}}`, source_channel = "public:a.b"): QueuedCopy => ({
  id: `copy-${i}`,
  source_channel,
  message,
  publisher: "alice",
  drop_rate: 0.5,
  dropped_at: 1000 + i,
  counted: false,
});
const indexOf = (c: QueuedCopy) => (JSON.parse(c.message) as { i: number }).i;

describe("drop copy queue", () => {
  it("sends copies enqueued together in batches of at most maxBatch", async () => {
    const batches: QueuedCopy[][] = [];
    const q = new DropCopyQueue({
      sink: { send: async (b) => void batches.push(b) },
      onFailure: () => {},
      maxBytes: 1 << 30,
      maxBatch: 100,
      windowMs: 1,
    });
    await Promise.all(Array.from({ length: 1000 }, (_, i) => q.enqueue(copy(i))));
    expect(batches.length).toBeLessThanOrEqual(10);
    expect(batches.every((b) => b.length <= 100)).toBe(true);
    expect(batches.flat().map(indexOf)).toEqual(Array.from({ length: 1000 }, (_, i) => i));
    expect(q.size).toBe(0);
    expect(q.bytes).toBe(0);
  });

  it("copies dropped while a batch is being sent fill the next batch, sent once the first is done", async () => {
    const batches: number[][] = [];
    const failures: FailureCause[] = [];
    let inFlight = 0;
    let mostInFlight = 0;
    let release!: () => void;
    const q = new DropCopyQueue({
      sink: {
        send: async (b) => {
          // Recorded here and asserted below: a throw in the sink is reported, never seen by the test.
          inFlight++;
          mostInFlight = Math.max(mostInFlight, inFlight);
          batches.push(b.map(indexOf));
          if (batches.length === 1) await new Promise<void>((r) => (release = r));
          else await new Promise((r) => setTimeout(r, 1));
          inFlight--;
        },
      },
      onFailure: (_failed, cause) => void failures.push(cause),
      maxBytes: 1 << 30,
      maxBatch: 10,
      windowMs: 0,
    });
    const first = q.enqueue(copy(0));
    await new Promise((r) => setTimeout(r, 1)); // the first batch is now being sent
    const rest = Array.from({ length: 30 }, (_, i) => q.enqueue(copy(i + 1)));
    // Counted from the moment they are queued: the one being sent and the 30 waiting.
    expect(q.size).toBe(31);
    release();
    await Promise.all([first, ...rest]);
    expect(mostInFlight).toBe(1); // one send at a time, in order
    expect(failures).toEqual([]);
    expect(batches).toEqual([
      [0],
      Array.from({ length: 10 }, (_, i) => i + 1),
      Array.from({ length: 10 }, (_, i) => i + 11),
      Array.from({ length: 10 }, (_, i) => i + 21),
    ]);
    expect(q.size).toBe(0);
  });

  it("bounds memory in bytes: a flood past the cap counts every copy turned away, and all reconcile", async () => {
    let release!: () => void;
    const stalled = new Promise<void>((r) => (release = r));
    const sent: number[] = [];
    const turnedAway = new Map<string, number>();
    let sendFailures = 0;
    const big = (i: number) => copy(i, JSON.stringify({ i, pad: "x".repeat(30_000) }), `public:src.c${i % 3}`);
    const cap = 8 * copyBytes(big(0));
    let mostBytes = 0;
    const q = new DropCopyQueue({
      sink: {
        send: async (b) => {
          await stalled; // the analytics channel is stalled
          sent.push(...b.map(indexOf));
        },
      },
      onFailure: (failed: CopyTally, cause) => {
        if (cause === "send failed") sendFailures += failed.total;
        else for (const [ch, e] of failed.byChannel) turnedAway.set(ch, (turnedAway.get(ch) ?? 0) + e.copies);
      },
      maxBytes: cap,
      maxBatch: 4,
      windowMs: 0,
    });
    const flood = Array.from({ length: 100 }, (_, i) => {
      const p = q.enqueue(big(i));
      mostBytes = Math.max(mostBytes, q.bytes);
      return p;
    });
    expect(mostBytes).toBeLessThanOrEqual(cap);
    expect(q.size).toBe(8); // what fits; the other 92 are only counted
    release();
    await Promise.all(flood);
    const failed = [...turnedAway.values()].reduce((a, n) => a + n, 0);
    expect(sent).toEqual(Array.from({ length: 8 }, (_, i) => i));
    expect(failed).toBe(92);
    expect(sent.length + failed + sendFailures).toBe(100); // every copy sent or counted as failed
    // Named by source channel: copies 8..99 spread over the three sources.
    expect(Object.fromEntries(turnedAway)).toEqual({ "public:src.c0": 31, "public:src.c1": 30, "public:src.c2": 31 });
    expect(q.bytes).toBe(0);
  });

  it("a copy arriving at an empty queue is kept, however large", async () => {
    const sent: number[] = [];
    const q = new DropCopyQueue({
      sink: { send: async (b) => void sent.push(...b.map(indexOf)) },
      onFailure: () => {},
      maxBytes: 10,
      windowMs: 0,
    });
    await q.enqueue(copy(1, JSON.stringify({ i: 1, pad: "x".repeat(100) })));
    expect(sent).toEqual([1]);
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
      onFailure: (f, cause) => {
        expect(cause).toBe("send failed");
        failed.push(f.total);
      },
      maxBytes: 1 << 30,
      maxBatch: 3,
      windowMs: 0,
    });
    await Promise.all(Array.from({ length: 7 }, (_, i) => q.enqueue(copy(i))));
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
      maxBytes: 1 << 30,
      windowMs: 0,
    });
    await q.enqueue(copy(1));
    order.push("enqueue settled");
    expect(order).toEqual(["failure handled", "enqueue settled"]);
  });

  it("a send that never settles holds the next batch back at most 5 s, its copies stop counting and are reported unsettled", async () => {
    vi.useFakeTimers();
    try {
      const sent: number[][] = [];
      const unsettled: Record<string, number>[] = [];
      const q = new DropCopyQueue({
        sink: {
          send: (b) => {
            sent.push(b.map(indexOf));
            return sent.length === 1 ? new Promise<void>(() => {}) : Promise.resolve(); // the first request was cut off
          },
        },
        onFailure: () => {},
        onUnsettled: (c) => unsettled.push(Object.fromEntries([...c.byChannel].map(([ch, e]) => [ch, e.copies]))),
        maxBytes: 1 << 30,
        windowMs: 0,
      });
      void q.enqueue(copy(0));
      await vi.advanceTimersByTimeAsync(1);
      const second = q.enqueue(copy(1));
      await vi.advanceTimersByTimeAsync(4900);
      expect(sent).toEqual([[0]]);
      expect(q.size).toBe(2);
      expect(unsettled).toEqual([]);
      await vi.advanceTimersByTimeAsync(200);
      await second;
      expect(sent).toEqual([[0], [1]]);
      expect(unsettled).toEqual([{ [copy(0).source_channel]: 1 }]); // the first batch only, once
      expect(q.size).toBe(0);
      expect(q.bytes).toBe(0);
    } finally {
      vi.useRealTimers();
    }
  });

  it("a batch whose leader died before sending (its timers never fire) is sent by the next one, never stranded", async () => {
    vi.useFakeTimers();
    try {
      const sent: number[][] = [];
      const failed: number[] = [];
      const unsettled: number[] = [];
      let waits = 0;
      const q = new DropCopyQueue({
        sink: { send: async (b) => void sent.push(b.map(indexOf)) },
        onFailure: (f) => void failed.push(f.total),
        onUnsettled: (c) => void unsettled.push(c.total),
        maxBytes: 1 << 30,
        windowMs: 10,
        // The first batch's leader is a request that was cut off while it gathered: its wait never ends.
        wait: (ms) => (waits++ === 0 ? new Promise<void>(() => {}) : new Promise((r) => setTimeout(r, ms))),
      });
      void q.enqueue(copy(0));
      void q.enqueue(copy(1)); // joins the dead leader's batch while it still looks alive
      void q.enqueue(copy(2));
      await vi.advanceTimersByTimeAsync(1000);
      expect(sent).toEqual([]);
      // The next copy finds the batch unsent with no sign of life: it sends that batch first, then its own.
      const next = q.enqueue(copy(3));
      await vi.advanceTimersByTimeAsync(1000);
      await next;
      expect(sent).toEqual([[0, 1, 2], [3]]);
      expect(failed).toEqual([]);
      expect(unsettled).toEqual([]);
      expect(q.size).toBe(0);
      expect(q.bytes).toBe(0);
    } finally {
      vi.useRealTimers();
    }
  });

  it("a copy enqueued after a flush drained starts a new flush (none is stranded)", async () => {
    const sent: number[] = [];
    const q = new DropCopyQueue({
      sink: { send: async (b) => void sent.push(b.length) },
      onFailure: () => {},
      maxBytes: 1 << 30,
      windowMs: 0,
    });
    await q.enqueue(copy(1));
    await q.enqueue(copy(2));
    expect(sent).toEqual([1, 1]);
    expect(q.size).toBe(0);
  });

  it("serialises a copy with the message text exactly as sent", () => {
    const text = serialiseCopy({ ...copy(1), message: '{"n":12345678901234567890}' });
    expect(text).toContain('"message":{"n":12345678901234567890}');
    expect(JSON.parse(text)).toMatchObject({
      source_channel: "public:a.b",
      publisher: "alice",
      drop_rate: 0.5,
      dropped_at: 1001,
    });
  });
});

describe("overflow log", () => {
  it("logs turned-away copies at most once per period, naming their source channels", () => {
    const lines: string[] = [];
    let now = 0;
    const log = new OverflowLog(
      (l) => lines.push(l),
      10_000,
      () => now,
    );
    const tally = (ch: string, n: number) => {
      const t = new CopyTally();
      t.add({ source_channel: ch, counted: false }, n);
      return t;
    };
    log.note(tally("public:a.b", 2)); // the first of a quiet period: at once
    now = 5_000;
    log.note(tally("public:c.d", 3)); // within the period: summed into the next line
    now = 10_000;
    log.note(tally("public:a.b", 1));
    expect(lines).toHaveLength(2);
    expect(lines[0]).toContain("2 dropped-message copies");
    expect(lines[0]).toContain("public:a.b (2)");
    expect(lines[1]).toContain("4 dropped-message copies");
    expect(lines[1]).toContain("public:c.d (3), public:a.b (1)");
  });
});

describe("failure tally", () => {
  it("names each source channel with its count and its first message ids", () => {
    const t = CopyTally.of([0, 1, 2, 3, 4].map((i) => copy(i)).concat([copy(9, "1", "public:c.d")]));
    expect(t.total).toBe(6);
    expect(t.describe()).toBe("public:a.b (5: copy-0, copy-1, copy-2, …), public:c.d (1: copy-9)");
  });
});
