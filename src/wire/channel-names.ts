/**
 * Channel names and channel patterns (docs/api.md, Channels), and most-specific rule selection.
 * Besides Floodgate's own `public:` and `private:` names, a Pusher channel `N` is the channel
 * `pusher:N` (docs/api.md, "The Pusher door"): its components are `N` split on `.`, and it is
 * private when `N` begins `private-` or `presence-`.
 *
 * Pure: no platform imports, so the same code serves routes, config parsing and unit tests.
 */
import { splitShardKey } from "../../functions/shard-key";
import { checkPusherName, PUSHER_COMPONENT, PUSHER_NAME_MAX, PUSHER_PREFIX, pusherVisibility } from "./pusher/names";

/** Who may read a channel: anyone (`public`), or a token that grants it (`private`). */
export type Visibility = "public" | "private";

/** The word before a name's colon: Floodgate's two visibilities, or `pusher` for a Pusher channel. */
export type Prefix = Visibility | "pusher";

/** A validated channel name such as `public:live.reactions` or `pusher:presence-room.1`. */
export interface ChannelName {
  readonly name: string;
  readonly prefix: Prefix;
  readonly visibility: Visibility;
  readonly components: readonly string[];
}

/** A validated pattern such as `public:live.*`, `private:team.**` or `pusher:presence-stadium.*`. */
export interface ChannelPattern {
  readonly source: string;
  /** The names it can match begin with this word (no wildcard there). */
  readonly prefix: Prefix;
  readonly segments: readonly string[];
  /** Specificity: literal 4, `*` 1, `**` 0, the prefix word counting as one literal. */
  readonly score: number;
}

/** Raised for any name or pattern the grammar forbids; the message says what is wrong. */
export class GrammarError extends Error {
  constructor(message: string) {
    super(message);
    this.name = "GrammarError";
  }
}

export const MAX_CHANNEL_LENGTH = 200;
export const MAX_COMPONENT_LENGTH = 64;
const COMPONENT = /^[a-z0-9_-]+$/;

/**
 * Components of a channel name, by prefix (docs/api.md, Channels), and its longest length: what
 * {@link parseChannelName} holds a name to and {@link whyNeverMatches} a pattern's reach. A Pusher
 * name is split on its dots, so it has as many components as dots and one more.
 */
const COMPONENTS = {
  public: { min: 2, max: 4, length: MAX_CHANNEL_LENGTH },
  private: { min: 3, max: 4, length: MAX_CHANNEL_LENGTH },
  pusher: { min: 1, max: PUSHER_NAME_MAX, length: PUSHER_PREFIX.length + PUSHER_NAME_MAX },
} as const;

function splitPrefix(input: string, what: string): [Prefix, string] {
  const colon = input.indexOf(":");
  if (colon < 0) throw new GrammarError(`${what} must start with "public:", "private:" or "pusher:"`);
  const prefix = input.slice(0, colon);
  if (prefix !== "public" && prefix !== "private" && prefix !== "pusher") {
    throw new GrammarError(`${what} must start with "public:", "private:" or "pusher:"`);
  }
  return [prefix, input.slice(colon + 1)];
}

function checkComponent(c: string, what: string, prefix: Prefix): void {
  if (c.length === 0) throw new GrammarError(`${what} has an empty component`);
  if (prefix === "pusher") {
    if (c.length > PUSHER_NAME_MAX) {
      throw new GrammarError(`${what} component is longer than ${PUSHER_NAME_MAX} characters`);
    }
    if (!PUSHER_COMPONENT.test(c)) {
      throw new GrammarError(`${what} components of a Pusher name may only contain A-Z, a-z, 0-9 and _ - = @ , ;`);
    }
    return;
  }
  if (c.length > MAX_COMPONENT_LENGTH) {
    throw new GrammarError(`${what} component is longer than ${MAX_COMPONENT_LENGTH} characters`);
  }
  if (!COMPONENT.test(c)) throw new GrammarError(`${what} components may only contain a-z, 0-9, "_" and "-"`);
}

/**
 * Parses `<visibility>:<c1>.<c2>[.<c3>[.<c4>]]`: 2–4 components of `[a-z0-9_-]+` (at most 64 each),
 * at least 3 for `private:`, at most 200 characters in all; or `pusher:<N>` for a Pusher channel
 * name `N` (src/wire/pusher/names.ts).
 * @throws GrammarError
 */
export function parseChannelName(input: string): ChannelName {
  if (typeof input !== "string" || input.length === 0) throw new GrammarError("channel name is empty");
  if (input.length > MAX_CHANNEL_LENGTH) {
    throw new GrammarError(`channel name is longer than ${MAX_CHANNEL_LENGTH} characters`);
  }
  const [prefix, rest] = splitPrefix(input, "channel name");
  if (prefix === "pusher") {
    const problem = checkPusherName(rest);
    if (problem) throw new GrammarError(problem);
    return { name: input, prefix, visibility: pusherVisibility(rest), components: rest.split(".") };
  }
  const components = rest.split(".");
  for (const c of components) checkComponent(c, "channel name", prefix);
  const { min, max } = COMPONENTS.public;
  if (components.length < min || components.length > max) {
    throw new GrammarError(`channel name must have ${min} to ${max} components`);
  }
  if (components.length < COMPONENTS[prefix].min) {
    throw new GrammarError(`${prefix} channel names need at least ${COMPONENTS[prefix].min} components`);
  }
  return { name: input, prefix, visibility: prefix, components };
}

/** True when `input` is a valid channel name. */
export function isChannelName(input: string): boolean {
  try {
    parseChannelName(input);
    return true;
  } catch {
    return false;
  }
}

/**
 * Parses a pattern: the prefix word (no wildcard there), then 1–8 segments, each a literal
 * component, `*` (exactly one component) or `**` (last segment only: one or more components). A
 * `pusher:` pattern's literals are parts of a Pusher name between its dots.
 * @throws GrammarError
 */
export function parsePattern(input: string): ChannelPattern {
  if (typeof input !== "string" || input.length === 0) throw new GrammarError("pattern is empty");
  const [prefix, rest] = splitPrefix(input, "pattern");
  const segments = rest.split(".");
  if (segments.length < 1 || segments.length > 8) throw new GrammarError("pattern depth must be 1 to 8 segments");
  let score = 4;
  segments.forEach((s, i) => {
    if (s === "**") {
      if (i !== segments.length - 1) throw new GrammarError('"**" may only be the last segment of a pattern');
    } else if (s === "*") {
      score += 1;
    } else {
      checkComponent(s, "pattern", prefix);
      score += 4;
    }
  });
  return { source: input, prefix, segments, score };
}

/**
 * Why no channel name can match `pattern`, or null when some channel does. Such a pattern is a
 * mistake wherever it is written (`private:team.*` names two components where a private channel
 * needs three): a mint refuses it (a token carrying it would fail every request it was meant for),
 * and so does the configuration (a rule that never applies).
 */
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

/** True when the channel matches the pattern. */
export function matchesPattern(pattern: ChannelPattern, channel: ChannelName): boolean {
  if (pattern.prefix !== channel.prefix) return false;
  const segs = pattern.segments;
  const comps = channel.components;
  for (let i = 0; i < segs.length; i++) {
    const s = segs[i];
    if (s === "**") return comps.length > i; // one or more remaining components
    if (i >= comps.length) return false;
    if (s !== "*" && s !== comps[i]) return false;
  }
  return segs.length === comps.length;
}

/** A pattern paired with what it selects. */
export interface Rule<T> {
  readonly pattern: ChannelPattern;
  readonly value: T;
}

/** Byte-order comparison (not locale order), as the tie-break requires. */
function byteOrder(a: string, b: string): number {
  return a < b ? -1 : a > b ? 1 : 0;
}

/**
 * Orders rules for selection: highest score first, ties by pattern string in byte order.
 * The first match in this order is the most specific rule.
 */
export function compileRules<T>(entries: ReadonlyArray<readonly [string, T]>): Rule<T>[] {
  return entries
    .map(([p, value]) => ({ pattern: parsePattern(p), value }))
    .sort((a, b) => b.pattern.score - a.pattern.score || byteOrder(a.pattern.source, b.pattern.source));
}

/** The most specific rule matching the channel, or undefined. `rules` must come from {@link compileRules}. */
export function selectRule<T>(rules: readonly Rule<T>[], channel: ChannelName): Rule<T> | undefined {
  for (const r of rules) if (matchesPattern(r.pattern, channel)) return r;
  return undefined;
}

/** True when any of the patterns matches the channel (a token's `chs`, `THROTTLE_THINNING`). */
export function anyPatternMatches(patterns: readonly ChannelPattern[], channel: ChannelName): boolean {
  return patterns.some((p) => matchesPattern(p, channel));
}

/** The channel name a channel object's key stands for, parsed (a shard's key names its channel). */
export function channelOfKey(key: string): ChannelName {
  return parseChannelName(splitShardKey(key).channel);
}
