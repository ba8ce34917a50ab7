/**
 * The record's objects in RECORD_BUCKET (docs/operations.md, "The record of dropped messages"): one
 * gzip NDJSON object per consumer invocation and UTC hour (functions/record-batch.ts `combineByHour`),
 * `drops/dt=YYYY-MM-DD/hour=HH/<first drop>-<unique>.ndjson.gz`. Its custom metadata holds its copy
 * count, so retention counts what it deletes without reading it, and a tag of each queue message it
 * holds, so a message delivered again finds the hours of it already recorded and writes none of them
 * twice.
 */
import {
  type CombinedObject,
  firstDropOfKey,
  hourOfKey,
  hourPrefix,
  type RecordBatch,
  type RecordCopy,
  recordLine,
  splitByHour,
} from "../../../functions/record-batch";
import { base64UrlEncode } from "../auth/tokens";

async function gzip(text: string): Promise<ArrayBuffer> {
  const stream = new Blob([text]).stream().pipeThrough(new CompressionStream("gzip"));
  return new Response(stream).arrayBuffer();
}

/** The text of a gzip NDJSON object. */
export async function gunzipText(body: ReadableStream<Uint8Array>): Promise<string> {
  return new Response(body.pipeThrough(new DecompressionStream("gzip"))).text();
}

/** An object's copy count, from its custom metadata (0 when missing or unreadable). */
export function copiesIn(obj: { customMetadata?: Record<string, string> }): number {
  const n = Number(obj.customMetadata?.copies);
  return Number.isSafeInteger(n) && n > 0 ? n : 0;
}

/**
 * A queue message's tag in an object's metadata: 12 base64url characters (72 bits) of its batch id's
 * SHA-256. An object holds at most a consumer batch's 100 messages: 1.3 KB of R2's 8 KB of metadata.
 */
export async function batchTag(batch: string): Promise<string> {
  const digest = await crypto.subtle.digest("SHA-256", new TextEncoder().encode(batch));
  return base64UrlEncode(new Uint8Array(digest)).slice(0, 12);
}

/**
 * Writes a consumer batch's objects, in parallel. `recorded` hears each written object's copies (its
 * copies were in no object before: those already recorded were left out by {@link recordedParts}),
 * `written` each put. Answers the keys written; an object that failed is not (its messages are
 * delivered again, and write only the hours still missing).
 */
export async function writeObjects(
  bucket: R2Bucket,
  objects: CombinedObject<RecordCopy>[],
  recorded: (n: number) => void,
  written: () => void = () => {},
): Promise<Set<string>> {
  const done = new Set<string>();
  await Promise.all(
    objects.map(async (o) => {
      try {
        const tags = await Promise.all(o.batches.map(batchTag));
        await bucket.put(o.key, await gzip(o.copies.map((c) => `${recordLine(c)}\n`).join("")), {
          httpMetadata: { contentType: "application/gzip" },
          customMetadata: { copies: String(o.copies.length), batches: tags.join(" ") },
        });
      } catch (e) {
        console.error(`floodgate record: could not write ${o.key}`, e instanceof Error ? e.message : e);
        return;
      }
      written();
      recorded(o.copies.length);
      done.add(o.key);
    }),
  );
  return done;
}

/** One hour of a queue message: its copies of that hour. */
export type HourPart = { key: string; copies: RecordCopy[] };

/**
 * Each message's hours split into those already in the record and those not: an hour is recorded
 * when an object of it lists the message's tag (or is the message's own, as written before objects
 * were combined). Each hour is listed once for all the messages, only as far as the latest of their
 * earliest drops in it: keys sort by their earliest drop, and an object holding a copy starts at or
 * before it.
 * @throws when the bucket fails (the caller retries the messages)
 */
export async function recordedParts(
  bucket: R2Bucket,
  batches: readonly RecordBatch[],
): Promise<{ recorded: HourPart[]; missing: HourPart[] }[]> {
  const parts = batches.map((b) => splitByHour(b.batch, b.copies));
  const tags = await Promise.all(batches.map((b) => batchTag(b.batch)));
  // Per hour: how far to list, and what was found in it.
  const hours = new Map<number, { until: number; tags: Set<string>; keys: Set<string> }>();
  parts.forEach((list) => {
    for (const part of list) {
      const hour = hourOfKey(part.key) as number;
      const first = part.copies[0]?.dropped_at ?? hour;
      const h = hours.get(hour);
      if (h) h.until = Math.max(h.until, first);
      else hours.set(hour, { until: first, tags: new Set(), keys: new Set() });
    }
  });
  await Promise.all(
    [...hours].map(async ([hour, h]) => {
      let cursor: string | undefined;
      scan: do {
        const page = await bucket.list({ prefix: hourPrefix(hour), cursor, include: ["customMetadata"] });
        for (const obj of page.objects) {
          if (firstDropOfKey(obj.key, hour) > h.until) break scan;
          h.keys.add(obj.key);
          for (const t of (obj.customMetadata?.batches ?? "").split(" ")) if (t) h.tags.add(t);
        }
        cursor = page.truncated ? page.cursor : undefined;
      } while (cursor);
    }),
  );
  return parts.map((list, i) => {
    const recorded: HourPart[] = [];
    const missing: HourPart[] = [];
    for (const part of list) {
      // `part.key` is the message's own object's key (functions/record-batch.ts splitByHour).
      const h = hours.get(hourOfKey(part.key) as number);
      (h && (h.tags.has(tags[i] as string) || h.keys.has(part.key)) ? recorded : missing).push(part);
    }
    return { recorded, missing };
  });
}
