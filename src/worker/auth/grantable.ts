/**
 * Whether a token's channel pattern can grant anything (docs/api.md, Tokens): a pattern no channel
 * name can match is a mistake in the mint request (`private:team.*` names two components where a
 * private channel needs three), and a token carrying it would fail every request it was meant for.
 * Pure: it reads the channel grammar's bounds from src/wire/channel-names.ts.
 */
import { type ChannelPattern, MAX_CHANNEL_LENGTH } from "../../wire/channel-names";
import { PUSHER_NAME_MAX, PUSHER_PREFIX } from "../../wire/pusher/names";

/**
 * Components of a channel name, by prefix (docs/api.md, Channels), and its longest length. A Pusher
 * name is split on its dots, so it has as many components as dots and one more.
 */
const COMPONENTS = {
  public: { min: 2, max: 4, length: MAX_CHANNEL_LENGTH },
  private: { min: 3, max: 4, length: MAX_CHANNEL_LENGTH },
  pusher: { min: 1, max: PUSHER_NAME_MAX, length: PUSHER_PREFIX.length + PUSHER_NAME_MAX },
} as const;

/** Why no channel name can match `pattern`, or null when some channel does. */
export function whyNeverMatches(pattern: ChannelPattern): string | null {
  const { min, max, length } = COMPONENTS[pattern.prefix];
  const segs = pattern.segments;
  const open = segs[segs.length - 1] === "**";
  // A closed pattern matches exactly its own depth; `**` takes one or more components more.
  const fixed = open ? segs.length - 1 : segs.length;
  const fewest = open ? Math.max(fixed + 1, min) : fixed;
  if (fewest > max || (!open && fixed < min)) {
    const matches = open ? `${fixed + 1} or more` : `exactly ${fixed}`;
    return `${pattern.prefix} channels have ${min} to ${max} components and this pattern matches ${matches}`;
  }
  // The shortest name it matches: its literals, one character per wildcard component, and the dots.
  const literals = segs.filter((s) => s !== "*" && s !== "**").reduce((n, s) => n + s.length, 0);
  const wildcards = fewest - (segs.length - segs.filter((s) => s === "*").length - (open ? 1 : 0));
  const shortest = pattern.prefix.length + 1 + literals + wildcards + (fewest - 1);
  if (shortest > length) {
    return `every channel it matches is longer than ${length} characters`;
  }
  return null;
}
