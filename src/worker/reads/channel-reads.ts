/**
 * Reads of what a channel holds, shared for up to a second in an isolate (docs/api.md, "Bounds":
 * reads cannot starve a channel). However many clients read a channel's history and presence, each
 * isolate asks the channel's object at most about once a second for each: its newest retained
 * messages (a snapshot that answers any page it covers) and its presence. Answers are at most
 * {@link READ_TTL_MS} old, and never hold a seq at or below the reader's `after`: a reader the shared
 * snapshot cannot place (an `after` past its head, an epoch not its own) waits for one taken after it
 * arrived, at most ten a second per channel; a page older than a snapshot holds is asked of the
 * object. Who may read is checked for
 * every request before it gets here (the read door, src/worker/auth/subscriber-access.ts), and
 * answers are keyed by the object that holds them (the channel's, or a shard's), so an answer only
 * ever reaches a reader of that channel or shard.
 *
 * The analytics channel is read from its object every time: its history is paged by operators
 * through every retained copy, not read by crowds.
 *
 * Each answer is disposed as it arrives ({@link released}): a shared one is kept for a second, long
 * enough for the garbage collector to find it first, and an answer passed on by code between here and
 * the object (the dev registry's proxy to another process) must not be left to it.
 */
import { ReadCache } from "../../../functions/read-cache";
import type { PresenceAnswer } from "../../channel/presence";
import { released } from "../../platform/rpc-result";
import type { Settings } from "../../settings/settings";
import { pusherBodyMax } from "../../wire/pusher/event-meta";
import { pusherName } from "../../wire/pusher/names";
import { resumePoint } from "../../wire/subscribe-params";
import { type HistorySnapshot, pageFromSnapshot, SNAPSHOT_LIMIT, snapshotOf } from "./history-snapshot";

/** The most a shared answer may be behind its object. */
export const READ_TTL_MS = 1000;
/**
 * The least time between two snapshots taken for reads a shared one cannot place (see
 * {@link ChannelReads.history}): such readers, however many, add at most ten asks a second per channel.
 */
const FRESH_SPACING_MS = 100;
/** How long a read waits for an answer another read is getting before it asks itself. */
const PATIENCE_MS = 2000;
/** Answers one isolate keeps: at most this many, and this many bytes (a snapshot may be 4 MiB). */
const MAX_ENTRIES = 1000;
export const READ_CACHE_BYTES = 16 * 1024 * 1024;

/** The part of a channel's object reads need (its stub, counted: src/worker/services.ts). */
export interface ReadBackend {
  history(after: number | null, limit: number, sourceChannel: string | null): Promise<string[]>;
  historyPage(
    after: number | null,
    limit: number,
    sourceChannel: string | null,
    epoch: string | null,
  ): Promise<{ frames: string[] } | { beyond: number }>;
  presence(key: string): Promise<PresenceAnswer>;
}

export class ChannelReads {
  readonly snapshots: ReadCache<HistorySnapshot>;
  readonly presences: ReadCache<PresenceAnswer>;

  constructor(
    private readonly config: Settings,
    private readonly object: (key: string) => ReadBackend,
  ) {
    this.snapshots = new ReadCache<HistorySnapshot>({
      ttlMs: READ_TTL_MS,
      maxEntries: MAX_ENTRIES,
      maxBytes: READ_CACHE_BYTES,
      sizeOf: (s) => s.bytes,
      patienceMs: PATIENCE_MS,
    });
    this.presences = new ReadCache<PresenceAnswer>({
      ttlMs: READ_TTL_MS,
      maxEntries: MAX_ENTRIES,
      maxBytes: READ_CACHE_BYTES / 16,
      sizeOf: (p) => 2 * JSON.stringify(p).length + 64,
      patienceMs: PATIENCE_MS,
    });
  }

  /**
   * A page of `key`'s history (docs/api.md, GET /v1/history), as the object would answer it; with
   * `epoch`, `after` counts in that numbering ("Numbering restarts": a gone epoch reads from seq 1).
   * `beyond`: `after` is past the head in the current numbering, as the object itself said.
   */
  async history(
    key: string,
    after: number | null,
    limit: number,
    source: string | null,
    epoch: string | null = null,
  ): Promise<{ frames: string[] } | { beyond: number }> {
    if (source === null && key !== this.config.analyticsChannel.name) {
      // A Pusher event's stored body can be longer than its data, which MAX_MESSAGE_BYTES bounds.
      const max = this.config.maxMessageBytes;
      const largest = pusherName(key) === null ? max : pusherBodyMax(max);
      const load = async () =>
        snapshotOf(released(await this.object(key).history(null, SNAPSHOT_LIMIT, null)), largest);
      let snapshot = await this.snapshots.get(key, load);
      let from: number | null | "beyond" = after;
      if (!sureOf(snapshot, after, epoch)) {
        // Past a shared snapshot's head, or in an epoch not its own: news it may not have seen, or a
        // restart. A snapshot taken after this read arrived holds everything the reader can know of,
        // so against it the object's own rule places `after` (docs/api.md, "Numbering restarts").
        snapshot = await this.snapshots.getFresh(key, FRESH_SPACING_MS, load);
        from = resumePoint(after, epoch, snapshot);
        if (from === "beyond") return { beyond: snapshot.head };
      }
      const page = pageFromSnapshot(snapshot, from, limit);
      if (page !== null) return { frames: page };
    }
    // Not covered by the snapshot (an old page of a long history, a page past 4 MiB), or not shared.
    return released(await this.object(key).historyPage(after, limit, source, epoch));
  }

  /** `key`'s presence (docs/api.md, GET /v1/presence). */
  presence(key: string): Promise<PresenceAnswer> {
    return this.presences.get(key, async () => released(await this.object(key).presence(key)));
  }
}

/**
 * Whether the snapshot can place a page after `after` in `epoch`: no `after`, or one within its head
 * in its own epoch (or none named). A snapshot is up to a second old, so anything past its head, or
 * an epoch not its own, may be news it has not seen (a message newer than it, the channel's new
 * numbering) rather than a restart (docs/api.md, "Numbering restarts"). A page it places may so be
 * short, never older than asked.
 */
function sureOf(snapshot: HistorySnapshot, after: number | null, epoch: string | null): boolean {
  return after === null || (after <= snapshot.head && (epoch === null || epoch === snapshot.epoch));
}
