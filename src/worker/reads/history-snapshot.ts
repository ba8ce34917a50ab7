/**
 * A channel's newest retained messages as its object answered them once, and the history pages it can
 * answer in the object's place (docs/api.md, GET /v1/history): the same frames, in the same order, as
 * the object would give at the moment it answered. A page the snapshot may not hold whole (older than
 * its first message while the channel retains more) is not answered here (null): the object answers it.
 */
import { PAGE_MAX_BYTES } from "../../relay/bounds";

/** Messages a snapshot asks for: the most a page may hold (and more than `HISTORY_LIMIT`'s default). */
export const SNAPSHOT_LIMIT = 1000;

export interface HistorySnapshot {
  /** The newest retained frames, oldest first. */
  frames: string[];
  /** Each frame's seq. */
  seqs: number[];
  /** It holds every message the channel retained: nothing older is left in the object. */
  complete: boolean;
  /** Every frame's seq was read, in ascending order (else the snapshot answers no page). */
  usable: boolean;
  /** Estimated bytes held (2 a character). */
  bytes: number;
  /**
   * The channel's head and epoch as of the snapshot (docs/api.md, "Numbering restarts"): its newest
   * frame's. No frame: nothing was ever kept under the current epoch (history keeps the newest), so
   * head 0 and no epoch anybody could hold.
   */
  head: number;
  epoch: string;
}

/** `"seq":N` comes before the message's own data in a frame (src/wire/frame-text.ts), so its first match is the frame's. */
const SEQ = /"seq":(\d+),/;
/** So does `"epoch":"E"`, part of the frame's head. */
const EPOCH = /"epoch":"([A-Za-z0-9_-]*)",/;

/**
 * The snapshot of an answer to `history(null, SNAPSHOT_LIMIT)`. It is complete when the object gave
 * fewer frames than asked and cannot have cut the page for its bytes: frames are longer than the
 * message data the object counts, so frames plus the largest message the channel can store
 * (`largestMessage`) within the page's bytes means the next message would have fitted too.
 */
export function snapshotOf(frames: string[], largestMessage: number): HistorySnapshot {
  const seqs = frames.map((f) => Number(SEQ.exec(f)?.[1] ?? Number.NaN));
  let total = 0;
  for (const f of frames) total += f.length;
  const ordered = seqs.every((s, i) => Number.isSafeInteger(s) && (i === 0 || s > (seqs[i - 1] as number)));
  return {
    frames,
    seqs,
    complete: frames.length < SNAPSHOT_LIMIT && total + largestMessage <= PAGE_MAX_BYTES,
    usable: ordered,
    bytes: 2 * total + 16 * frames.length + 256,
    head: seqs.at(-1) ?? 0,
    epoch: EPOCH.exec(frames.at(-1) ?? "")?.[1] ?? "",
  };
}

/** The page `history(after, limit)` answers, from the snapshot; null when the snapshot cannot say. */
export function pageFromSnapshot(s: HistorySnapshot, after: number | null, limit: number): string[] | null {
  if (!s.usable) return null;
  const n = s.frames.length;
  let from: number;
  let to: number;
  if (after === null) {
    // The newest `limit`: held whole when the snapshot has that many, or has everything.
    if (limit > n && !s.complete) return null;
    to = n;
    from = Math.max(0, n - limit);
  } else {
    // From the first seq past `after`: held when nothing between `after` and the snapshot's first
    // message can be missing.
    if (!s.complete && (n === 0 || (s.seqs[0] as number) > after + 1)) return null;
    from = lowerBound(s.seqs, after + 1);
    to = Math.min(n, from + limit);
  }
  // No cut to make: the snapshot is itself one of the object's pages, so any run of it holds no more
  // than a page's bytes, and the object would give the same run whole.
  return s.frames.slice(from, to);
}

/** The first index whose seq is at least `seq` (seqs ascending). */
function lowerBound(seqs: number[], seq: number): number {
  let lo = 0;
  let hi = seqs.length;
  while (lo < hi) {
    const mid = (lo + hi) >> 1;
    if ((seqs[mid] as number) < seq) lo = mid + 1;
    else hi = mid;
  }
  return lo;
}
