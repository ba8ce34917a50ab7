/**
 * Pusher channel names (docs/api.md, "The Pusher door"): what a name may hold, which names are
 * private, and the Floodgate channel each one is (`pusher:<name>`). Pure and self-contained.
 */

/** Longest Pusher channel name: `pusher:` and it fit in a Floodgate channel name's 200 characters. */
export const PUSHER_NAME_MAX = 164;

/** The characters of a Pusher channel name. */
const PUSHER_NAME = /^[A-Za-z0-9_\-=@,.;]+$/;

/** One part of a Pusher name between its dots (what a `pusher:` pattern's literal segment may be). */
export const PUSHER_COMPONENT = /^[A-Za-z0-9_\-=@,;]+$/;

/** The Floodgate channel of every Pusher channel begins with this. */
export const PUSHER_PREFIX = "pusher:";

/** Names Floodgate does not serve: end-to-end encrypted channels need a key it never holds. */
const ENCRYPTED = "private-encrypted-";

/** What is wrong with a Pusher channel name, or null when it is one. */
export function checkPusherName(name: string): string | null {
  if (name.length === 0) return "Pusher channel name is empty";
  if (name.length > PUSHER_NAME_MAX) return `Pusher channel name is longer than ${PUSHER_NAME_MAX} characters`;
  if (!PUSHER_NAME.test(name)) return "Pusher channel names may only contain A-Z, a-z, 0-9 and _ - = @ , . ;";
  if (name.startsWith(ENCRYPTED)) return "private-encrypted- channels are not supported";
  return null;
}

/** `private-` and `presence-` channels need an authorization; every other one is public. */
export function pusherVisibility(name: string): "public" | "private" {
  return isPresence(name) || name.startsWith("private-") ? "private" : "public";
}

/** A presence channel: its subscribers are members with a `user_id`. */
export function isPresence(name: string): boolean {
  return name.startsWith("presence-");
}

/**
 * The client key a presence subscription is counted under on its channel (src/channel/client-cap.ts):
 * its member, so the channel's per-client counts are its members (src/channel/pusher-audience.ts).
 */
export const MEMBER_PREFIX = "user:";

export function memberKey(userId: string): string {
  return `${MEMBER_PREFIX}${userId}`;
}

/** The Floodgate channel of Pusher channel `name`. */
export function pusherChannel(name: string): string {
  return `${PUSHER_PREFIX}${name}`;
}

/** The Pusher name of a Floodgate channel (or a shard's key, functions/shard-key.ts), or null when it is none. */
export function pusherName(channel: string): string | null {
  if (!channel.startsWith(PUSHER_PREFIX)) return null;
  const hash = channel.indexOf("#");
  return channel.slice(PUSHER_PREFIX.length, hash < 0 ? undefined : hash);
}
