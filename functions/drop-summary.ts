/**
 * Summaries of dropped messages (docs/api.md, "Summaries of drops"): which key a dropped message
 * counts under, a count per key bounded in keys, and the summary frame's `by_key` (the largest keys
 * and `"(other)"`). Pure and platform-neutral: the publish route computes a dropped message's key
 * where the drop is decided, the channel's object (src/channel/drop-summaries.ts) sums them per
 * `SUMMARY_INTERVAL` and sends the frame.
 *
 * Every count lands somewhere: a value that is not a key, a key too long, or a key past the bound all
 * count under {@link OTHER_KEY}, so the counts always add up to the drops.
 */
import { splitShardKey } from "./shard-key";

/** Where everything that is not one of the named keys counts. */
export const OTHER_KEY = "(other)";
/** Keys a summary frame names; the rest count under {@link OTHER_KEY}. */
export const SUMMARY_TOP_KEYS = 20;
/**
 * Longest string a key may be, in characters; a longer value counts under {@link OTHER_KEY}. With
 * {@link SUMMARY_MAX_KEYS} this bounds one channel's tally at about 256 KiB of key text (2 bytes a
 * character), and a dropped message's key adds at most 256 bytes to its queued copy.
 */
export const SUMMARY_MAX_KEY_CHARS = 128;
/**
 * Most distinct keys one tally holds (a channel's interval, one isolate's batch); a new key past it
 * counts under {@link OTHER_KEY}. Far above the 20 a frame names, so the largest keys are exact
 * unless a flood makes up more than 1,000 values in one interval.
 */
export const SUMMARY_MAX_KEYS = 1000;

/** A JSON Pointer that does not parse (RFC 6901). */
export class PointerError extends Error {
  constructor(message: string) {
    super(message);
    this.name = "PointerError";
  }
}

/**
 * Parses a JSON Pointer (RFC 6901) into its reference tokens: `""` is the whole document, anything
 * else starts with `/`; `~0` is `~` and `~1` is `/`, and any other `~` is an error.
 * @throws PointerError
 */
export function parsePointer(text: string): string[] {
  if (typeof text !== "string") throw new PointerError("a JSON Pointer must be a string");
  if (text === "") return [];
  if (!text.startsWith("/")) throw new PointerError(`"${text}" is not a JSON Pointer: it must be "" or start with "/"`);
  return text
    .slice(1)
    .split("/")
    .map((t) => {
      if (/~(?![01])/.test(t)) throw new PointerError(`"${text}": "~" must be followed by 0 or 1`);
      return t.replace(/~1/g, "/").replace(/~0/g, "~");
    });
}

const ARRAY_INDEX = /^(0|[1-9][0-9]*)$/;

/** The value `tokens` point to in `doc`, or undefined when there is none (RFC 6901 evaluation). */
export function valueAt(doc: unknown, tokens: readonly string[]): unknown {
  let v: unknown = doc;
  for (const t of tokens) {
    if (Array.isArray(v)) {
      if (!ARRAY_INDEX.test(t)) return undefined;
      v = v[Number(t)];
    } else if (v !== null && typeof v === "object") {
      if (!Object.hasOwn(v, t)) return undefined;
      v = (v as Record<string, unknown>)[t];
    } else {
      return undefined;
    }
  }
  return v;
}

/**
 * The key a value counts under: a string as it is, a number or boolean as its JSON text, anything
 * else (null, an object, an array, no value) and strings longer than {@link SUMMARY_MAX_KEY_CHARS}
 * under {@link OTHER_KEY}.
 */
export function summaryKey(value: unknown): string {
  if (typeof value === "string") return value.length <= SUMMARY_MAX_KEY_CHARS ? value : OTHER_KEY;
  if (typeof value === "number" || typeof value === "boolean") return JSON.stringify(value);
  return OTHER_KEY;
}

/** The key of one message under a parsed pointer. */
export function messageKey(message: unknown, pointer: readonly string[]): string {
  return summaryKey(valueAt(message, pointer));
}

/** Counts per key, at most `maxKeys` distinct keys besides {@link OTHER_KEY}; the rest fold into it. */
export class KeyTally {
  readonly counts = new Map<string, number>();
  total = 0;

  constructor(private readonly maxKeys: number = SUMMARY_MAX_KEYS) {}

  add(key: string, n = 1): void {
    if (!(n > 0)) return;
    const k = this.counts.has(key) || this.named() < this.maxKeys ? key : OTHER_KEY;
    this.counts.set(k, (this.counts.get(k) ?? 0) + n);
    this.total += n;
  }

  /** Adds every count of `byKey` (a plain object from another tally). */
  addAll(byKey: Readonly<Record<string, number>>): void {
    for (const [k, n] of Object.entries(byKey)) this.add(k, n);
  }

  /** As a plain object (for an RPC call). */
  toObject(): Record<string, number> {
    return Object.fromEntries(this.counts);
  }

  /** Distinct keys held besides {@link OTHER_KEY}. */
  private named(): number {
    return this.counts.size - (this.counts.has(OTHER_KEY) ? 1 : 0);
  }
}

/** Byte order, for ties between equal counts. */
function byteOrder(a: string, b: string): number {
  return a < b ? -1 : a > b ? 1 : 0;
}

/**
 * A frame's `by_key`: the `top` largest keys (ties in byte order of the key), inserted largest first
 * (JSON text keeps that order, except that integer-like keys come first), then {@link OTHER_KEY}
 * with everything else (its own count included), present only when it is not 0. The counts add up
 * to the tally's total.
 */
export function topKeys(counts: ReadonlyMap<string, number>, top: number = SUMMARY_TOP_KEYS): Record<string, number> {
  const named = [...counts].filter(([k, n]) => k !== OTHER_KEY && n > 0);
  named.sort((a, b) => b[1] - a[1] || byteOrder(a[0], b[0]));
  let other = counts.get(OTHER_KEY) ?? 0;
  for (const [, n] of named.slice(top)) other += n;
  const entries = named.slice(0, top);
  if (other > 0) entries.push([OTHER_KEY, other]);
  // Defined, never assigned: `out["__proto__"] = n` would set the prototype and lose the count.
  return Object.fromEntries(entries);
}

/** One summary frame as JSON text (docs/api.md, "Summaries of drops"). */
export function summaryFrame(key: string, from: number, to: number, tally: KeyTally): string {
  // A shard's channel object (its key, functions/shard-key.ts) names its channel and its shard.
  const { channel, shard } = splitShardKey(key);
  return JSON.stringify({
    type: "summary",
    channel,
    ...(shard === null ? {} : { shard }),
    from,
    to,
    dropped: tally.total,
    by_key: topKeys(tally.counts),
  });
}
