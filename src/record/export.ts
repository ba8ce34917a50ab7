/**
 * `GET /v1/admin/analytics/export?from=<ms>&to=<ms>[&source_channel=<channel>]` (docs/api.md): every
 * retained copy on the analytics channel dropped in [from, to), as NDJSON (one analytics frame per
 * line), oldest drop first. Streamed a page at a time: the next page is asked of the analytics
 * channel's object only when the client has read the last one, so a day of drops never sits in the
 * Worker's memory. Copies that land while it runs come after the others, each exactly once
 * (src/record/channel-record.ts, exportPage).
 */
import type { ExportCursor } from "../channel/types";
import { invalidArgument, orUnavailable } from "../http/errors";
import { intParam, sourceChannelParam } from "../http/params";
import type { Config } from "../platform/config";
import { countedChannelStub } from "../platform/services";

/** Copies per page asked of the object (each page is also capped in bytes there). */
export const EXPORT_PAGE_ROWS = 1000;

export interface ExportQuery {
  from: number;
  to: number;
  sourceChannel: string | null;
}

/** Validates the query: `from` and `to` are required epoch ms, `from` ≤ `to`. @throws ApiError 400 */
export function exportQuery(query: (name: string) => string | undefined, config: Config): ExportQuery {
  const from = intParam(query("from"), "from");
  const to = intParam(query("to"), "to");
  if (from === null || to === null) throw invalidArgument("from and to are required: epoch milliseconds, from ≤ to");
  if (from > to) throw invalidArgument("from must not be later than to");
  const source = sourceChannelParam(query("source_channel"), config.analyticsChannel, config);
  return { from, to, sourceChannel: source?.name ?? null };
}

const encoder = new TextEncoder();

/** The export as a streamed NDJSON response. The first page is read before answering: a 503 then. */
export async function exportResponse(env: Env, config: Config, q: ExportQuery): Promise<Response> {
  const channel = config.analyticsChannel.name;
  const stub = countedChannelStub(env, channel);
  const page = (cursor: ExportCursor | null) =>
    stub.exportPage(q.from, q.to, q.sourceChannel, cursor, EXPORT_PAGE_ROWS);
  const first = await orUnavailable("analytics channel", () => page(null));
  let cursor = first.next;
  const body = new ReadableStream<Uint8Array>(
    {
      start(controller) {
        if (first.ndjson) controller.enqueue(encoder.encode(first.ndjson));
        if (!cursor) controller.close();
      },
      // Called only when the client has taken what was there (high-water mark 0): one page at a time.
      async pull(controller) {
        if (!cursor) return;
        try {
          const next = await page(cursor);
          if (next.ndjson) controller.enqueue(encoder.encode(next.ndjson));
          cursor = next.next;
          if (!cursor) controller.close();
        } catch (e) {
          // The status line is sent already: the stream ends without its last newline-terminated line.
          console.error("floodgate: analytics export interrupted", e instanceof Error ? e.message : e);
          controller.error(new Error("analytics export interrupted"));
        }
      },
    },
    { highWaterMark: 0 },
  );
  return new Response(body, { headers: { "content-type": "application/x-ndjson; charset=utf-8" } });
}
