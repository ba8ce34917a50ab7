/** The record's pure decisions (functions/record-batch.ts): packing, send groups, hour keys, lines. */
import { describe, expect, it } from "vitest";
import {
  estimateBytes,
  HOUR_MS,
  hourOfKey,
  objectKey,
  PACK_LIMIT_BYTES,
  packCopies,
  QUEUE_MESSAGE_LIMIT_BYTES,
  type RecordCopy,
  recordLine,
  SEND_BATCH_BYTES,
  SEND_BATCH_MESSAGES,
  sendGroups,
  splitByHour,
} from "../../functions/record-batch";

const copy = (messageBytes: number, droppedAt = 0, id = crypto.randomUUID()): RecordCopy => ({
  id,
  source_channel: "public:a.b",
  message: JSON.stringify({ pad: "x".repeat(Math.max(0, messageBytes - 10)) }),
  publisher: "p",
  drop_rate: 1,
  dropped_at: droppedAt,
});

describe("packing copies into queue messages", () => {
  it("fills each message up to the pack limit, below the queue's 128 KB, keeping order", () => {
    const copies = Array.from({ length: 300 }, () => copy(1000));
    const { messages, tooLarge } = packCopies(copies);
    expect(tooLarge).toEqual([]);
    expect(messages.flatMap((m) => m.copies)).toEqual(copies);
    for (const m of messages) {
      expect(m.bytes).toBeLessThanOrEqual(PACK_LIMIT_BYTES);
      expect(m.copies.reduce((a, c) => a + estimateBytes(c), 0)).toBeLessThan(QUEUE_MESSAGE_LIMIT_BYTES);
    }
    // ~1.1 KB each: about a hundred to a message, so three messages for 300.
    expect(messages).toHaveLength(3);
  });

  it("a copy too large for any message is set apart, never split; large ones that fit go one to a message", () => {
    const big = copy(125_000);
    const a = copy(70_000);
    const b = copy(70_000);
    const small = copy(100);
    const { messages, tooLarge } = packCopies([a, big, b, small]);
    expect(tooLarge).toEqual([big]);
    expect(messages.map((m) => m.copies)).toEqual([[a], [b, small]]);
  });

  it("counts text beyond Latin-1 at two bytes a character", () => {
    const latin = { ...copy(0), message: JSON.stringify("é".repeat(1000)) };
    const wide = { ...copy(0), message: JSON.stringify("€".repeat(1000)) };
    expect(estimateBytes(wide) - estimateBytes(latin)).toBeGreaterThanOrEqual(1000);
  });
});

describe("send groups", () => {
  it("at most 100 messages and 256 KB per sendBatch call", () => {
    const many = Array.from({ length: 250 }, () => ({ bytes: 1000 }));
    expect(sendGroups(many).map((g) => g.length)).toEqual([100, 100, 50]);
    const full = Array.from({ length: 5 }, () => ({ bytes: 120_000 }));
    const groups = sendGroups(full);
    expect(groups.map((g) => g.length)).toEqual([2, 2, 1]);
    for (const g of groups) expect(g.reduce((a, m) => a + m.bytes, 0)).toBeLessThanOrEqual(SEND_BATCH_BYTES);
    expect(SEND_BATCH_MESSAGES).toBe(100);
  });
});

describe("hour keys", () => {
  it("names the UTC hour of dropped_at, and reads it back", () => {
    const t = Date.UTC(2026, 11, 1, 7, 59, 59, 999);
    const key = objectKey(Math.floor(t / HOUR_MS) * HOUR_MS, "b1");
    expect(key).toBe("drops/dt=2026-12-01/hour=07/b1.ndjson.gz");
    expect(hourOfKey(key)).toBe(Date.UTC(2026, 11, 1, 7));
    expect(hourOfKey("other/dt=2026-12-01/hour=07/x")).toBeNull();
  });

  it("splits a batch by hour, hours in order and copies in drop order within each", () => {
    const h = Date.UTC(2026, 0, 1, 23);
    const copies = [copy(10, h + HOUR_MS + 1), copy(10, h + 5), copy(10, h + 1), copy(10, h + HOUR_MS)];
    const parts = splitByHour("b", copies);
    expect(parts.map((p) => p.key)).toEqual([
      "drops/dt=2026-01-01/hour=23/b.ndjson.gz",
      "drops/dt=2026-01-02/hour=00/b.ndjson.gz",
    ]);
    expect(parts.map((p) => p.copies.map((c) => c.dropped_at - h))).toEqual([
      [1, 5],
      [HOUR_MS, HOUR_MS + 1],
    ]);
  });
});

describe("the record's line", () => {
  it("has the API's fields in order, the message spliced in unparsed", () => {
    const c = { ...copy(0, 42, "id-1"), message: '{"n":12345678901234567890}' };
    const line = recordLine(c);
    expect(line).toBe(
      '{"id":"id-1","source_channel":"public:a.b","message":{"n":12345678901234567890},"publisher":"p","drop_rate":1,"dropped_at":42}',
    );
  });
});
