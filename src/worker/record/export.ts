/**
 * `GET /v1/admin/analytics/export?from=<ms>&to=<ms>[&source_channel=<channel>]` (docs/api.md): every
 * copy in the record (RECORD_BUCKET) dropped in [from, to), one record line per line as stored,
 * hours in order and lines in `dropped_at` order within an hour. Streamed with constant memory: each
 * hour's objects are listed in the order of their earliest drop (their keys start with it) and merged
 * (functions/record-merge.ts), each object read as a stream, opened only when the merge reaches its
 * earliest drop; the stream is pulled only as fast as the client reads. A copy is in exactly one
 * object (a redelivered batch overwrites its own), so each goes out once.
 */
import { firstDropOfKey, HOUR_MS, hourOf, hourPrefix } from "../../../functions/record-batch";
import { type MergeSource, mergeByDropTime, type TimedLine, TooManyOpen } from "../../../functions/record-merge";
import { formatDuration } from "../../settings/durations";
import type { Settings } from "../../settings/settings";
import { invalidArgument, unavailable } from "../../wire/errors";
import { wholeParam } from "../../wire/subscribe-params";
import { orUnavailable } from "../http/errors";
import { sourceChannelParam } from "../http/params";

/**
 * Most record objects of one hour open at once: those whose drop times overlap one moment (about one
 * per isolate batch in flight then). Each holds one read chunk, so this bounds the export's memory;
 * past it the export ends with an error (logged): query such an hour in place (docs/operations.md,
 * "Querying the record in place").
 */
export const EXPORT_MAX_OPEN_OBJECTS = 256;

/** Bytes of lines gathered into one chunk of the response. */
const CHUNK_BYTES = 64 * 1024;

export interface ExportQuery {
  from: number;
  to: number;
  sourceChannel: string | null;
}

/**
 * Validates the query: `from` and `to` are required epoch ms, `from` < `to`, at most
 * `RECORD_RETENTION` apart. @throws ApiError 400
 */
export function exportQuery(query: (name: string) => string | undefined, config: Settings): ExportQuery {
  const from = wholeParam(query("from"), "from");
  const to = wholeParam(query("to"), "to");
  if (from === null || to === null) throw invalidArgument("from and to are required: epoch milliseconds, from < to");
  if (to <= from) throw invalidArgument("to must be later than from");
  if (to - from > config.recordRetentionMs)
    throw invalidArgument(`the range may span at most RECORD_RETENTION (${formatDuration(config.recordRetentionMs)})`);
  const source = sourceChannelParam(query("source_channel"), config.analyticsChannel, config);
  return { from, to, sourceChannel: source?.name ?? null };
}

/** The objects of one hour, listed page by page, in key order (= the order of their earliest drop). */
async function* hourObjects(bucket: R2Bucket, hour: number, q: ExportQuery): AsyncGenerator<MergeSource> {
  let cursor: string | undefined;
  do {
    const page = await bucket.list({ prefix: hourPrefix(hour), cursor });
    for (const entry of page.objects) {
      const key = entry.key;
      yield { first: firstDropOfKey(key, hour), open: () => objectLines(bucket, key, q) };
    }
    cursor = page.truncated ? page.cursor : undefined;
  } while (cursor);
}

/** One object's matching lines, read and decompressed as a stream (one chunk at a time). */
async function* objectLines(bucket: R2Bucket, key: string, q: ExportQuery): AsyncGenerator<TimedLine> {
  const obj = await bucket.get(key);
  if (!obj) return; // deleted by retention since the listing
  const reader = obj.body.pipeThrough(new DecompressionStream("gzip")).pipeThrough(new TextDecoderStream()).getReader();
  let rest = "";
  try {
    for (;;) {
      const { done, value } = await reader.read();
      if (done) break;
      rest += value;
      let nl = rest.indexOf("\n");
      while (nl >= 0) {
        const line = matching(rest.slice(0, nl), q);
        rest = rest.slice(nl + 1);
        if (line) yield line;
        nl = rest.indexOf("\n");
      }
    }
    const line = matching(rest, q);
    if (line) yield line;
  } finally {
    reader.cancel().catch(() => {});
  }
}

function matching(text: string, q: ExportQuery): TimedLine | null {
  if (!text) return null;
  const c = JSON.parse(text) as { id: string; source_channel: string; dropped_at: number };
  if (c.dropped_at < q.from || c.dropped_at >= q.to) return null;
  if (q.sourceChannel !== null && c.source_channel !== q.sourceChannel) return null;
  return { text, dropped_at: c.dropped_at, id: c.id };
}

/** Every matching line of the range: hours in order, each hour merged in drop order. */
async function* rangeLines(bucket: R2Bucket, q: ExportQuery): AsyncGenerator<TimedLine> {
  for (let hour = hourOf(q.from); hour <= hourOf(q.to - 1); hour += HOUR_MS)
    yield* mergeByDropTime(hourObjects(bucket, hour, q), EXPORT_MAX_OPEN_OBJECTS);
}

const encoder = new TextEncoder();

/**
 * The export as a streamed NDJSON response. The range is read up to its first matching line before
 * answering, so a bucket that fails then answers 503; later failures end the stream early (without
 * its last newline-terminated line).
 */
export async function exportResponse(env: Env, _config: Settings, q: ExportQuery): Promise<Response> {
  const lines = rangeLines(env.RECORD_BUCKET, q);
  const tooDense = (e: unknown): never => {
    if (e instanceof TooManyOpen) {
      console.error(`floodgate: analytics export refused: ${e.message}`);
      throw unavailable("export_too_dense", "an hour of the range is too dense to export; query the record in place");
    }
    throw e;
  };
  const first = await orUnavailable("record", () => lines.next().catch(tooDense));
  /** The next chunk of lines, or null when every line was sent. */
  const chunk = async (): Promise<string | null> => {
    let text = "";
    for (let r = await lines.next(); !r.done; r = await lines.next()) {
      text += `${r.value.text}\n`;
      if (text.length >= CHUNK_BYTES) return text;
    }
    return text || null;
  };
  const body = new ReadableStream<Uint8Array>(
    {
      start(controller) {
        if (first.done) controller.close();
        else controller.enqueue(encoder.encode(`${first.value.text}\n`));
      },
      // Called only when the client has taken what was there (high-water mark 0).
      async pull(controller) {
        try {
          const text = await chunk();
          if (text === null) controller.close();
          else controller.enqueue(encoder.encode(text));
        } catch (e) {
          console.error("floodgate: analytics export interrupted", e instanceof Error ? e.message : e);
          controller.error(new Error("analytics export interrupted"));
        }
      },
      cancel() {
        void lines.return(undefined);
      },
    },
    { highWaterMark: 0 },
  );
  return new Response(body, { headers: { "content-type": "application/x-ndjson; charset=utf-8" } });
}
