/**
 * A message's keys for the subscribers its relay thins (docs/api.md, "Each reader's rate"): its
 * conflation key (`CONFLATE_KEYS`: the latest message per key is held) and the key it counts under in
 * a subscriber summary's `by_key` (`THROTTLE_SUMMARY`, as in summaries of drops). Read once per
 * message per relay — the frame's text parsed once, whatever the number of subscribers — and only for
 * messages some subscriber does not take at once; a channel with neither rule parses nothing.
 */
import { SUMMARY_MAX_KEY_CHARS, summaryKey, valueAt } from "../../functions/drop-summary";
import type { SummaryRule } from "../settings/settings";
import type { LiveFrame } from "../wire/frame-text";
import type { FrameKeys } from "./reader";

const NO_KEYS: FrameKeys = { conflate: null, summary: null };

/** The value at a conflation pointer as a key: a string (up to 128 characters), a number or a boolean; else none. */
export function conflationKey(value: unknown): string | null {
  if (typeof value === "string") return value.length <= SUMMARY_MAX_KEY_CHARS ? value : null;
  if (typeof value === "number" || typeof value === "boolean") return JSON.stringify(value);
  return null;
}

export class FrameKeyReader {
  private readonly known = new WeakMap<LiveFrame, FrameKeys>();

  /** The channel's rules (null: none). */
  constructor(
    private readonly conflate: SummaryRule | null,
    private readonly summary: SummaryRule | null,
  ) {}

  /** Subscriber summaries on this channel name keys (`by_key`): a `THROTTLE_SUMMARY` rule matches it. */
  get byKey(): boolean {
    return this.summary !== null;
  }

  /** `f`'s keys (its text parsed the first time it is asked for). */
  readonly keysOf = (f: LiveFrame): FrameKeys => {
    if (!this.conflate && !this.summary) return NO_KEYS;
    let keys = this.known.get(f);
    if (!keys) {
      let data: unknown;
      try {
        data = (JSON.parse(f.text) as { data?: unknown }).data;
      } catch {
        data = undefined;
      }
      keys = {
        conflate: this.conflate ? conflationKey(valueAt(data, this.conflate.tokens)) : null,
        summary: this.summary ? summaryKey(valueAt(data, this.summary.tokens)) : null,
      };
      this.known.set(f, keys);
    }
    return keys;
  };
}
