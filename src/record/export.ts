/**
 * `GET /v1/admin/analytics/export?from=<ms>&to=<ms>[&source_channel=<channel>]` (docs/api.md): every
 * copy in the record (RECORD_BUCKET) dropped in [from, to), one record line per line as stored,
 * hours in order and lines in `dropped_at` order within an hour. Streamed an hour at a time: the
 * next hour is listed and read only when the client has taken the last one, so memory is one hour's
 * matching copies whatever the range ({@link HOUR_MAX_BYTES} bounds it). A copy is in exactly one
 * object (a redelivered batch overwrites its own), so each goes out once.
 */
import { HOUR_MS, hourOf, hourPrefix } from "../../functions/record-batch";
import { ApiError, invalidArgument, orUnavailable } from "../http/errors";
import { intParam, sourceChannelParam } from "../http/params";
import type { Config } from "../platform/config";
import { formatDuration } from "../platform/durations";
import { gunzipText } from "./record-objects";

/**
 * Most bytes of matching lines one hour may hold for the export to sort it in memory. An hour past
 * it ends the export with an error (logged), before any line of that hour; query such an hour in
 * place instead (docs/operations.md, "Querying the record in place").
 */
export const HOUR_MAX_BYTES = 32 * 1024 * 1024;

export interface ExportQuery {
  from: number;
  to: number;
  sourceChannel: string | null;
}

/**
 * Validates the query: `from` and `to` are required epoch ms, `from` < `to`, at most
 * `RECORD_RETENTION` apart. @throws ApiError 400
 */
export function exportQuery(query: (name: string) => string | undefined, config: Config): ExportQuery {
  const from = intParam(query("from"), "from");
  const to = intParam(query("to"), "to");
  if (from === null || to === null) throw invalidArgument("from and to are required: epoch milliseconds, from < to");
  if (to <= from) throw invalidArgument("to must be later than from");
  if (to - from > config.recordRetentionMs)
    throw invalidArgument(`the range may span at most RECORD_RETENTION (${formatDuration(config.recordRetentionMs)})`);
  const source = sourceChannelParam(query("source_channel"), config.analyticsChannel, config);
  return { from, to, sourceChannel: source?.name ?? null };
}

interface Line {
  text: string;
  dropped_at: number;
  id: string;
}

/** The matching lines of one hour, every object read, in `dropped_at` order (then id). */
async function readHour(bucket: R2Bucket, hour: number, q: ExportQuery): Promise<string> {
  const lines: Line[] = [];
  let bytes = 0;
  let cursor: string | undefined;
  do {
    const page = await bucket.list({ prefix: hourPrefix(hour), cursor });
    for (const entry of page.objects) {
      const obj = await bucket.get(entry.key);
      if (!obj) continue; // deleted by retention since the listing
      for (const text of (await gunzipText(obj.body)).split("\n")) {
        if (!text) continue;
        const c = JSON.parse(text) as { id: string; source_channel: string; dropped_at: number };
        if (c.dropped_at < q.from || c.dropped_at >= q.to) continue;
        if (q.sourceChannel !== null && c.source_channel !== q.sourceChannel) continue;
        bytes += text.length + 1;
        if (bytes > HOUR_MAX_BYTES) throw new HourTooLarge(hour);
        lines.push({ text, dropped_at: c.dropped_at, id: c.id });
      }
    }
    cursor = page.truncated ? page.cursor : undefined;
  } while (cursor);
  lines.sort((a, b) => a.dropped_at - b.dropped_at || (a.id < b.id ? -1 : a.id > b.id ? 1 : 0));
  return lines.map((l) => `${l.text}\n`).join("");
}

class HourTooLarge extends Error {
  constructor(hour: number) {
    super(`the hour ${new Date(hour).toISOString()} holds more than ${HOUR_MAX_BYTES} bytes of matching copies`);
  }
}

const encoder = new TextEncoder();

/**
 * The export as a streamed NDJSON response. Hours up to the first with a matching copy are read
 * before answering, so a bucket that fails then answers 503; later failures end the stream early
 * (without its last newline-terminated line).
 */
export async function exportResponse(env: Env, _config: Config, q: ExportQuery): Promise<Response> {
  const bucket = env.RECORD_BUCKET;
  let hour = hourOf(q.from);
  const last = hourOf(q.to - 1);
  /** The next hour's lines that are not empty, or null when every hour was read. */
  const next = async (): Promise<string | null> => {
    while (hour <= last) {
      const text = await readHour(bucket, hour, q);
      hour += HOUR_MS;
      if (text) return text;
    }
    return null;
  };
  const first = await orUnavailable("record", async () => {
    try {
      return await next();
    } catch (e) {
      if (e instanceof HourTooLarge) {
        console.error(`floodgate: analytics export refused: ${e.message}`);
        throw new ApiError("unavailable", "an hour of the range is too large to export; query the record in place");
      }
      throw e;
    }
  });
  const body = new ReadableStream<Uint8Array>(
    {
      start(controller) {
        if (first === null) controller.close();
        else controller.enqueue(encoder.encode(first));
      },
      // Called only when the client has taken what was there (high-water mark 0): one hour at a time.
      async pull(controller) {
        try {
          const text = await next();
          if (text === null) controller.close();
          else controller.enqueue(encoder.encode(text));
        } catch (e) {
          console.error("floodgate: analytics export interrupted", e instanceof Error ? e.message : e);
          controller.error(new Error("analytics export interrupted"));
        }
      },
    },
    { highWaterMark: 0 },
  );
  return new Response(body, { headers: { "content-type": "application/x-ndjson; charset=utf-8" } });
}
