/**
 * A Pusher event's key for its channel's summary of drops (docs/api.md, "Summaries of drops"): the
 * rule's JSON Pointer reads the body `{"event","data"}`, and a pointer under `/data/…` reads into
 * `data` when `data` is JSON text (what the Pusher libraries send), so `/data/emoji` groups by the
 * `emoji` of the data an app published.
 */
import { messageKey } from "../../../functions/drop-summary";

export function pusherSummaryKey(event: string, data: string, tokens: readonly string[]): string {
  if (tokens[0] === "data" && tokens.length > 1) {
    try {
      return messageKey(JSON.parse(data), tokens.slice(1));
    } catch {
      // not JSON text: the pointer reads the body as it is
    }
  }
  return messageKey({ event, data }, tokens);
}
