/**
 * Frames as the text that goes on the wire (docs/api.md, GET /v1/subscribe; their shapes are in
 * ./frames.ts): one message as its JSON text frame and as one SSE event, side frames, the expired
 * frame, packed frames. Built once where a message is appended (the channel) and sent as text to
 * every relay, so no relay parses or re-encodes a payload.
 */
import { OTHER_KEY, SUMMARY_MAX_KEY_CHARS, SUMMARY_TOP_KEYS } from "../../functions/drop-summary";
import { splitShardKey } from "../../functions/shard-key";
import { TOKEN_EXPIRED_REASON } from "./close-codes";

/** The fields of a stored message a frame carries. */
export interface MessageFields {
  /** Published with `Floodgate-Priority: high` (kept beside the frame, never in its text). */
  priority?: boolean | number | null;
  seq: number;
  id: string;
  /** The payload as minified JSON text. */
  data: string;
  published_at: number;
  /** Pusher events only: {@link LiveFrame.meta}. */
  meta?: string | null;
}

/** One message's frame with its seq (SSE uses `<epoch>:<seq>` as the event id; relays use the seq for order). */
export interface LiveFrame {
  /**
   * The channel's epoch when the message was appended (docs/api.md, "Numbering restarts"), also in
   * the text: beside it for the SSE event id, so no relay reads the text.
   */
  epoch?: string;
  /**
   * A priority message (docs/api.md, "Priority messages"): a subscriber's own rate never skips it
   * (docs/api.md, "Each reader's rate"). Beside the text, never in it: only relays read it.
   */
  priority?: true;
  seq: number;
  text: string;
  /**
   * A Pusher event's delivery details (src/wire/pusher/event-meta.ts) as JSON text: the one connection
   * it must skip (a client event's sender, the HTTP API's `socket_id`) and a client event's `user_id`.
   * Never in the frame's text: only connection hosts read it.
   */
  meta?: string;
}

/**
 * Which subscribers a side frame is for: `summary` goes to every subscriber, `presence` to those
 * that asked for it (`?presence=1`), both the frame's SSE event name; `pusher` is a Pusher frame
 * already built (member events, `subscription_count`), sent to connection hosts only, never to relays.
 */
export type SideEvent = "summary" | "presence" | "pusher";

/**
 * A frame outside the message order (docs/api.md, "Side frames"): it carries no seq, is never stored
 * in history and never replayed on resume. Built once by the channel as text, like a message frame.
 */
export interface SideFrame {
  event: SideEvent;
  text: string;
  /**
   * Presence frames only: their place in the channel's presence news (increasing). A subscriber sent
   * the `state` as of version v skips frames up to v, which that state already counts.
   */
  version?: number;
}

/**
 * The wire frame, built as text so the payload is never parsed again. `key` is the channel object's
 * name: a shard's key (functions/shard-key.ts) gives frames `"shard":"<name>"` after `channel`; then
 * the channel's `epoch` (docs/api.md, "Numbering restarts"), which is part of its head.
 */
export function frame(key: string, epoch: string, m: MessageFields): string {
  return `${frameHead(key, epoch)}"seq":${m.seq},"id":${JSON.stringify(m.id)},"data":${m.data},"published_at":${m.published_at}}`;
}

/** The one key and epoch an object frames for, and its head, kept: every frame of a channel starts the same. */
let headKey = "";
let headEpoch = "";
let headText = '{"type":"message","channel":"","epoch":"",';

/**
 * `{"type":"message","channel":…,`, for a shard `"shard":…,`, then `"epoch":…,`: what every frame of
 * `key` starts with while its numbering lasts.
 */
export function frameHead(key: string, epoch: string): string {
  if (key !== headKey || epoch !== headEpoch) {
    const { channel, shard } = splitShardKey(key);
    const shardField = shard === null ? "" : `"shard":${JSON.stringify(shard)},`;
    headText = `{"type":"message","channel":${JSON.stringify(channel)},${shardField}"epoch":${JSON.stringify(epoch)},`;
    headKey = key;
    headEpoch = epoch;
  }
  return headText;
}

/**
 * `"channel":…` and, for a shard's object (its key, functions/shard-key.ts), `,"shard":…`: how a side
 * frame names where it comes from, like a message frame's head.
 */
export function channelFields(key: string): string {
  const { channel, shard } = splitShardKey(key);
  return `"channel":${JSON.stringify(channel)}${shard === null ? "" : `,"shard":${JSON.stringify(shard)}`}`;
}

/**
 * What one subscriber skipped in [`from`, `to`) (docs/api.md, "Each reader's rate"), as text: a
 * side frame, sent to that subscriber alone. `byKey` when the channel groups its summaries.
 */
export function subscriberSummaryFrame(
  key: string,
  from: number,
  to: number,
  skipped: number,
  byKey: Record<string, number> | null,
): string {
  const grouped = byKey ? `,"by_key":${JSON.stringify(byKey)}` : "";
  return `{"type":"summary","scope":"subscriber",${channelFields(key)},"from":${from},"to":${to},"skipped":${skipped}${grouped}}`;
}

/** The longest epoch ms (13 digits, until the year 2286) and count (2^53) a summary can carry. */
const LONGEST_MS = 9_999_999_999_999;
const LONGEST_COUNT = String(Number.MAX_SAFE_INTEGER).length;
/** Bytes a character of a key can take in JSON text: a control character or lone surrogate, `\u001f`. */
const ESCAPED_CHAR_MAX_BYTES = 6;

/**
 * The most bytes {@link subscriberSummaryFrame} can make for channel `key`, whatever it counts: the
 * longest `from`, `to` and `skipped`, and with `byKey` the {@link SUMMARY_TOP_KEYS} keys a frame names,
 * each of {@link SUMMARY_MAX_KEY_CHARS} characters escaped at their longest, and {@link OTHER_KEY}.
 * What a paced replay keeps room for (docs/api.md, "Each reader's rate"): its close sends one.
 */
export function subscriberSummaryMaxBytes(key: string, byKey: boolean): number {
  const plain = utf8Length(subscriberSummaryFrame(key, LONGEST_MS, LONGEST_MS, Number.MAX_SAFE_INTEGER, null));
  if (!byKey) return plain;
  const named = 2 + SUMMARY_MAX_KEY_CHARS * ESCAPED_CHAR_MAX_BYTES + 1 + LONGEST_COUNT; // "key":n
  const other = JSON.stringify(OTHER_KEY).length + 1 + LONGEST_COUNT;
  // ,"by_key":{…} with its entries and the commas between them.
  return plain + ',"by_key":{}'.length + SUMMARY_TOP_KEYS * (named + 1) + other;
}

/**
 * An SSE event id: `<epoch>:<seq>` (docs/api.md, "Numbering restarts"), so a browser's `Last-Event-ID`
 * names the numbering its seq counts in; a bare seq when the epoch is not known.
 */
export function sseId(seq: number, epoch: string | undefined): string {
  return epoch ? `${epoch}:${seq}` : String(seq);
}

/** One SSE `message` event; the frame is single-line JSON, so one `data:` line carries it. */
export function sseEvent(f: LiveFrame): string {
  return `id: ${sseId(f.seq, f.epoch)}\nevent: message\ndata: ${f.text}\n\n`;
}

const encoder = new TextEncoder();

/** One SSE side event: no `id`, so a reader's `Last-Event-ID` stays the last message's seq. */
export function sideSseEvent(f: SideFrame): string {
  return `event: ${f.event}\ndata: ${f.text}\n\n`;
}

/** Events as one chunk for every SSE reader (read-only once written). */
export function sseChunk(events: string[]): Uint8Array {
  return encoder.encode(events.join(""));
}

/** UTF-8 size of a string without encoding it. */
export function utf8Length(s: string): number {
  let n = s.length;
  for (let i = 0; i < s.length; i++) {
    const c = s.charCodeAt(i);
    if (c >= 0x80) n += c >= 0x800 && (c < 0xd800 || c > 0xdfff) ? 2 : 1;
  }
  return n;
}

/** Frames until they hold `maxBytes` (at least one); `more` when frames were left out. */
export function takeFrameBytes(frames: Iterable<LiveFrame>, maxBytes: number): { frames: LiveFrame[]; more: boolean } {
  const out: LiveFrame[] = [];
  let bytes = 0;
  for (const f of frames) {
    bytes += utf8Length(f.text);
    if (bytes > maxBytes && out.length > 0) return { frames: out, more: true };
    out.push(f);
  }
  return { frames: out, more: false };
}

/**
 * Frames packed as JSON arrays (`[frame,frame,…]`, docs/api.md, "Packed frames"), in order, each array
 * at most `maxBytes` (one frame alone may be more: every array holds at least one). The texts are
 * joined, never parsed or encoded again.
 */
export function packFrames(frames: readonly { text: string }[], maxBytes: number): string[] {
  const out: string[] = [];
  let part: string[] = [];
  let bytes = 2; // the brackets
  for (const f of frames) {
    const n = utf8Length(f.text);
    if (part.length > 0 && bytes + 1 + n > maxBytes) {
      out.push(`[${part.join(",")}]`);
      part = [];
      bytes = 2;
    }
    bytes += (part.length > 0 ? 1 : 0) + n;
    part.push(f.text);
  }
  if (part.length > 0) out.push(`[${part.join(",")}]`);
  return out;
}

/**
 * The last frame of a subscription whose token expired (docs/api.md, "How long a subscription lasts"):
 * `seq` is the last seq the subscriber was sent or is past (its resume floor when it was sent nothing
 * since it connected), so the client resumes with `?after=<seq>` and misses nothing published while
 * it fetches a fresh token — even on a quiet channel, where it holds no seq of its own. The same frame
 * ends a subscription whose session was revoked, and an anonymous SSE stream at its longest lifetime,
 * each with its own `reason` (src/wire/close-codes.ts).
 */
export function expiredFrame(seq: number, epoch?: string, reason: string = TOKEN_EXPIRED_REASON): string {
  const epochField = epoch ? `,"epoch":${JSON.stringify(epoch)}` : "";
  return `{"type":"expired","reason":${JSON.stringify(reason)}${epochField},"seq":${seq}}`;
}
