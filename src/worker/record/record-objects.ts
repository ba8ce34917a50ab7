/**
 * The record's objects in RECORD_BUCKET (docs/operations.md, "The record of dropped messages"): one
 * gzip NDJSON object per queue message and UTC hour, `drops/dt=YYYY-MM-DD/hour=HH/<batch>.ndjson.gz`,
 * its copy count in the object's custom metadata so retention can count what it deletes without
 * reading it.
 */
import { type RecordBatch, type RecordCopy, recordLine, splitByHour } from "../../../functions/record-batch";

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
 * Writes one batch, an object per hour it spans, and tells `recorded` the copies of each object newly
 * written, as soon as it is: an object already there was written by an earlier delivery of the same
 * batch (at least once), with the same copies, and was counted then; it is overwritten with the same
 * bytes and not counted again. `written` hears each object put (redeliveries included: what R2 bills).
 * @throws when the bucket fails; the objects written before stay, counted (a retry overwrites them).
 */
export async function writeBatch(
  bucket: R2Bucket,
  batch: RecordBatch,
  recorded: (n: number) => void,
  written: () => void = () => {},
): Promise<void> {
  for (const part of splitByHour(batch.batch, batch.copies)) {
    const existed = (await bucket.head(part.key)) !== null;
    const body = await gzip(part.copies.map((c) => `${recordLine(c)}\n`).join(""));
    await bucket.put(part.key, body, {
      httpMetadata: { contentType: "application/gzip" },
      customMetadata: { copies: String(part.copies.length) },
    });
    written();
    if (!existed) recorded(part.copies.length);
  }
}

/** A batch's copies split into those whose hour's object is in the bucket and those whose is not. */
export async function recordedParts(
  bucket: R2Bucket,
  batch: RecordBatch,
): Promise<{ recorded: RecordCopy[]; missing: RecordCopy[] }> {
  const recorded: RecordCopy[] = [];
  const missing: RecordCopy[] = [];
  for (const part of splitByHour(batch.batch, batch.copies)) {
    ((await bucket.head(part.key)) !== null ? recorded : missing).push(...part.copies);
  }
  return { recorded, missing };
}
