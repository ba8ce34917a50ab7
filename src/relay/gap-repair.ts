/**
 * The repair at the start of every delivery (docs/api.md, "Relays"), shared by a relay's stream
 * (./stream.ts) and a connection host's lane (src/connection-host/lane.ts): each knows the last seq it
 * sent, and a call from the channel that does not follow it (a call that failed, frames the channel let
 * go, a restart) has the hole before it fetched from the channel's history first, so no subscriber sees
 * a seq skipped, repeated or out of order. What to do with a hole that cannot be crossed (which close
 * codes, what is counted) stays with each caller.
 *
 * Two steps, so that a call with no hole is sent without an await: nothing can come or go between
 * taking the subscribers and sending to them.
 */

import type { LiveFrame } from "../wire/frame-text";
import { PAGE_MAX_BYTES } from "./bounds";
import type { ChannelForRelay } from "./calls";

/** Seqs after `after` up to `upTo` that were never sent. */
export interface Hole {
  after: number;
  upTo: number;
}

/**
 * A call's frames past `last` (the last seq sent), and the hole before them when they do not follow
 * it: up to the first of them, or up to `end` (the call's head) when none is new.
 */
export function pastLastSent(
  frames: readonly LiveFrame[],
  last: number,
  end: number,
): { fresh: LiveFrame[]; hole: Hole | null } {
  const fresh = frames.filter((f) => f.seq > last);
  const firstNew = fresh[0]?.seq ?? end + 1;
  return { fresh, hole: firstNew > last + 1 && end > last ? { after: last, upTo: firstNew - 1 } : null };
}

/**
 * The hole's frames from the channel's history, or why it cannot be crossed: `too-big`, more than
 * one page of {@link PAGE_MAX_BYTES} (further behind than a subscriber may be); `gone`, history no longer holds
 * all of it (trimmed past `HISTORY_LIMIT`), and nothing newer may be sent across it.
 */
export async function fillHole(
  channel: Pick<ChannelForRelay, "framesAfter">,
  hole: Hole,
): Promise<{ frames: LiveFrame[] } | { lost: "too-big" | "gone" }> {
  const page = await channel.framesAfter(hole.after, hole.upTo, PAGE_MAX_BYTES);
  if (page.more) return { lost: "too-big" };
  if (page.frames.length !== hole.upTo - hole.after || page.frames[0]?.seq !== hole.after + 1) return { lost: "gone" };
  return { frames: page.frames };
}
