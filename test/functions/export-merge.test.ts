/**
 * The export's merge (functions/record-merge.ts): lines of many sorted sources come out once each in
 * (`dropped_at`, `id`) order, and only the sources that overlap in drop time are open at once — the
 * export's memory does not grow with the hour, only with how many batches overlap. Batch ids start
 * with their earliest drop, so an hour's listing (key order) is the merge's source order.
 */
import fc from "fast-check";
import { describe, expect, it } from "vitest";
import { batchId, firstDropOfKey, objectKey } from "../../functions/record-batch";
import { type MergeSource, mergeByDropTime, type TimedLine, TooManyOpen } from "../../functions/record-merge";

/** Sources from sorted time lists, counting how many are open (opened, not yet read to the end). */
function sources(lists: number[][]) {
  const gauge = { open: 0, most: 0 };
  const ordered = lists
    .map((times, k) =>
      [...times].sort((a, b) => a - b).map((t, i) => ({ text: `${k}:${i}`, dropped_at: t, id: `${k}-${i}` })),
    )
    .filter((l) => l.length > 0)
    .sort((a, b) => (a[0] as TimedLine).dropped_at - (b[0] as TimedLine).dropped_at);
  async function* read(lines: TimedLine[]): AsyncGenerator<TimedLine> {
    gauge.open++;
    gauge.most = Math.max(gauge.most, gauge.open);
    try {
      for (const l of lines) yield l;
    } finally {
      gauge.open--;
    }
  }
  async function* list(): AsyncGenerator<MergeSource> {
    for (const lines of ordered) yield { first: (lines[0] as TimedLine).dropped_at, open: () => read(lines) };
  }
  return { list, gauge, all: ordered.flat() };
}

async function collect(it: AsyncIterable<TimedLine>): Promise<TimedLine[]> {
  const out: TimedLine[] = [];
  for await (const l of it) out.push(l);
  return out;
}

const order = (a: TimedLine, b: TimedLine) => a.dropped_at - b.dropped_at || (a.id < b.id ? -1 : a.id > b.id ? 1 : 0);

describe("the export's merge", () => {
  it("emits every line once in (dropped_at, id) order, whatever the sources (property)", async () => {
    await fc.assert(
      fc.asyncProperty(
        fc.array(fc.array(fc.integer({ min: 0, max: 50 }), { maxLength: 8 }), { maxLength: 12 }),
        async (lists) => {
          const { list, all } = sources(lists);
          const got = await collect(mergeByDropTime(list(), 1000));
          expect(got).toEqual([...all].sort(order));
        },
      ),
    );
  });

  it("holds open only the objects that overlap in drop time: 2,000 back-to-back batches, at most 2 open", async () => {
    const lists = Array.from({ length: 2000 }, (_, k) => Array.from({ length: 10 }, (_, i) => k * 100 + i * 10));
    const { list, gauge } = sources(lists);
    const got = await collect(mergeByDropTime(list(), 4));
    expect(got).toHaveLength(20_000);
    expect(gauge.most).toBeLessThanOrEqual(2);
  });

  it("batches that overlap five at a time keep five open, and more than the limit overlapping is refused", async () => {
    const lists = Array.from({ length: 200 }, (_, k) => [Math.floor(k / 5) * 100, Math.floor(k / 5) * 100 + 50]);
    const five = sources(lists);
    expect(await collect(mergeByDropTime(five.list(), 5))).toHaveLength(400);
    expect(five.gauge.most).toBe(5);
    await expect(collect(mergeByDropTime(sources(lists).list(), 4))).rejects.toBeInstanceOf(TooManyOpen);
  });

  it("a batch id starts with its earliest drop, so keys sort by it and carry it", () => {
    const hour = Date.UTC(2026, 11, 1, 7);
    const a = batchId([{ dropped_at: hour + 900 }, { dropped_at: hour + 5 }], "u1");
    const b = batchId([{ dropped_at: hour + 40 }], "u0");
    expect(a).toBe(`${hour + 5}-u1`);
    expect([objectKey(hour, a), objectKey(hour, b)].sort()).toEqual([objectKey(hour, a), objectKey(hour, b)]);
    expect(firstDropOfKey(objectKey(hour, b), hour)).toBe(hour + 40);
    // A key without it may hold any drop of its hour.
    expect(firstDropOfKey(objectKey(hour, "legacy"), hour)).toBe(hour);
  });
});
