/**
 * The record of dropped messages on a queue and an object store, as pure decisions: how copies are
 * packed into queue messages, how one message is split into hourly objects, how an object is named
 * and what its lines are. Platform-neutral (no queue, no bucket here); src/worker/record/ and src/worker/drops/ do the I/O.
 */

/** One copy as it travels on the queue and as it is stored, one per line. */
export interface RecordCopy {
  id: string;
  source_channel: string;
  /** The shard of `source_channel` the message was dropped in (docs/api.md, "Shards"); absent when unsharded. */
  shard?: string;
  /** The message as the publisher sent it (JSON text), spliced into the line unparsed. */
  message: string;
  publisher: string;
  drop_rate: number;
  dropped_at: number;
}

/** A queue message: many copies, the batch id its objects are named by, and the live view to feed. */
export interface RecordBatch {
  /** Made by the producer, so a redelivered message (or its dead letter) names the same objects. */
  batch: string;
  /** The analytics channel the copies are handed to once recorded. */
  analytics: string;
  copies: RecordCopy[];
}

/**
 * Largest queue message the platform takes: 128 KB. Floodgate packs to {@link PACK_LIMIT_BYTES}, below
 * it, since the bytes are estimated (see {@link estimateBytes}), not measured after serialisation.
 */
export const QUEUE_MESSAGE_LIMIT_BYTES = 128_000;
export const PACK_LIMIT_BYTES = 120_000;
/** Most messages, and most bytes, one `sendBatch` call takes. */
export const SEND_BATCH_MESSAGES = 100;
export const SEND_BATCH_BYTES = 256_000;

/** Per-message and per-copy overhead of the queue's serialisation, rounded up. */
const MESSAGE_OVERHEAD_BYTES = 256;
const COPY_OVERHEAD_BYTES = 96;

/** Bytes of a string once serialised: one a character, two when any character is beyond Latin-1. */
function textBytes(s: string): number {
  // biome-ignore lint/suspicious/noControlCharactersInRegex: the range is the point
  return /[^\u0000-\u00ff]/.test(s) ? 2 * s.length : s.length;
}

/** A copy's bytes on the queue, an upper bound of the structured-clone size. */
export function estimateBytes(c: RecordCopy): number {
  return (
    textBytes(c.id) +
    textBytes(c.source_channel) +
    textBytes(c.shard ?? "") +
    textBytes(c.message) +
    textBytes(c.publisher) +
    COPY_OVERHEAD_BYTES
  );
}

/** What {@link packCopies} made: the queue messages, and copies too large for any message. */
export interface Packed<C extends RecordCopy> {
  messages: { copies: C[]; bytes: number }[];
  tooLarge: C[];
}

/**
 * Packs copies into as few queue messages as fit {@link PACK_LIMIT_BYTES}, in order. A copy that
 * cannot fit even alone (its message is about 120 KB: with `MAX_MESSAGE_BYTES` above that, or a
 * Pusher event stored at twice its data with a character beyond Latin-1, which counts two bytes a
 * character) is returned in `tooLarge`: it is counted as a failed copy, never split across messages.
 */
export function packCopies<C extends RecordCopy>(copies: readonly C[]): Packed<C> {
  const messages: { copies: C[]; bytes: number }[] = [];
  const tooLarge: C[] = [];
  let current: { copies: C[]; bytes: number } | null = null;
  for (const c of copies) {
    const size = estimateBytes(c);
    if (size + MESSAGE_OVERHEAD_BYTES > PACK_LIMIT_BYTES) {
      tooLarge.push(c);
      continue;
    }
    if (!current || current.bytes + size > PACK_LIMIT_BYTES) {
      current = { copies: [], bytes: MESSAGE_OVERHEAD_BYTES };
      messages.push(current);
    }
    current.copies.push(c);
    current.bytes += size;
  }
  return { messages, tooLarge };
}

/** Groups packed messages into `sendBatch` calls within the call's message and byte limits. */
export function sendGroups<M extends { bytes: number }>(messages: readonly M[]): M[][] {
  const groups: M[][] = [];
  let group: M[] = [];
  let bytes = 0;
  for (const m of messages) {
    if (group.length > 0 && (group.length >= SEND_BATCH_MESSAGES || bytes + m.bytes > SEND_BATCH_BYTES)) {
      groups.push(group);
      group = [];
      bytes = 0;
    }
    group.push(m);
    bytes += m.bytes;
  }
  if (group.length > 0) groups.push(group);
  return groups;
}

export const HOUR_MS = 3_600_000;

/** The start (epoch ms) of the UTC hour holding `t`. */
export function hourOf(t: number): number {
  return Math.floor(t / HOUR_MS) * HOUR_MS;
}

/** `drops/dt=YYYY-MM-DD/hour=HH/`: the prefix of every object of the UTC hour starting at `hour`. */
export function hourPrefix(hour: number): string {
  const iso = new Date(hour).toISOString();
  return `drops/dt=${iso.slice(0, 10)}/hour=${iso.slice(11, 13)}/`;
}

/** The hour (epoch ms) a record key names, or null for a key that is not the record's. */
export function hourOfKey(key: string): number | null {
  const m = /^drops\/dt=(\d{4}-\d{2}-\d{2})\/hour=(\d{2})\//.exec(key);
  if (!m) return null;
  const t = Date.parse(`${m[1]}T${m[2]}:00:00Z`);
  return Number.isNaN(t) ? null : t;
}

/** The key of one batch's object for one hour. */
export function objectKey(hour: number, batch: string): string {
  return `${hourPrefix(hour)}${batch}.ndjson.gz`;
}

/**
 * One batch split by the UTC hour of each copy's `dropped_at`: one object per hour, its copies in
 * `dropped_at` order (stable), hours in order.
 */
export function splitByHour<C extends RecordCopy>(batch: string, copies: readonly C[]): { key: string; copies: C[] }[] {
  const byHour = new Map<number, C[]>();
  for (const c of copies) {
    const h = hourOf(c.dropped_at);
    const list = byHour.get(h);
    if (list) list.push(c);
    else byHour.set(h, [c]);
  }
  return [...byHour]
    .sort((a, b) => a[0] - b[0])
    .map(([hour, list]) => ({ key: objectKey(hour, batch), copies: list.sort((a, b) => a.dropped_at - b.dropped_at) }));
}

/** One object of a consumer batch: an hour's copies of every queue message, and which messages they came from. */
export interface CombinedObject<C extends RecordCopy> {
  key: string;
  copies: C[];
  /** The queue messages (their batch ids) with copies in this object. */
  batches: string[];
}

/**
 * The copies of every queue message one consumer invocation writes, as one object per UTC hour
 * (not one per message and hour: a busy record would otherwise hold tens of objects a second, more
 * than its retention sweep deletes). `unique` names the invocation; each object's key starts with its
 * earliest drop like a message's (see {@link batchId}).
 */
export function combineByHour<C extends RecordCopy>(
  parts: readonly { batch: string; copies: readonly C[] }[],
  unique: string,
): CombinedObject<C>[] {
  const byHour = new Map<number, { copies: C[]; batches: Set<string> }>();
  for (const part of parts) {
    for (const c of part.copies) {
      const h = hourOf(c.dropped_at);
      let group = byHour.get(h);
      if (!group) {
        group = { copies: [], batches: new Set() };
        byHour.set(h, group);
      }
      group.copies.push(c);
      group.batches.add(part.batch);
    }
  }
  return [...byHour]
    .sort((a, b) => a[0] - b[0])
    .map(([hour, g]) => ({
      key: objectKey(hour, batchId(g.copies, unique)),
      copies: g.copies.sort((a, b) => a.dropped_at - b.dropped_at),
      batches: [...g.batches],
    }));
}

/**
 * How long the queue waits before delivering a message again after its `attempts`-th delivery
 * failed, in seconds: `base`, then twice as long each time, at most `max`. With the consumer's 5 s
 * base, 5 retries wait 5, 10, 20, 40 and 80 s: an outage of R2 or of the analytics object of up to
 * a minute is over before the fourth.
 */
export function retryDelaySeconds(attempts: number, base: number, max: number): number {
  const n = Math.max(1, Math.floor(attempts));
  return Math.min(max, base * 2 ** Math.min(n - 1, 30));
}

/** A copy as one line of the record (no newline): the message spliced in as the publisher sent it. */
export function recordLine(c: RecordCopy): string {
  return `{"id":${JSON.stringify(c.id)},"source_channel":${JSON.stringify(c.source_channel)}${c.shard === undefined ? "" : `,"shard":${JSON.stringify(c.shard)}`},"message":${c.message},"publisher":${JSON.stringify(c.publisher)},"drop_rate":${JSON.stringify(c.drop_rate)},"dropped_at":${JSON.stringify(c.dropped_at)}}`;
}

/**
 * A batch's id: the earliest `dropped_at` of its copies as 13 digits, `-`, then `unique` (a random
 * id). Object keys end with it, so listing an hour yields its objects in the order of their earliest
 * drop, which lets the export merge them in drop order holding only the objects that overlap
 * (functions/record-merge.ts). Made once by the producer, so a redelivery names the same objects.
 */
export function batchId(copies: readonly { dropped_at: number }[], unique: string): string {
  let first = Number.POSITIVE_INFINITY;
  for (const c of copies) if (c.dropped_at < first) first = c.dropped_at;
  const t = Number.isFinite(first) ? Math.max(0, Math.floor(first)) : 0;
  return `${String(t).padStart(13, "0")}-${unique}`;
}

/**
 * The earliest drop an object may hold, from its key (see {@link batchId}); a key without it (not
 * written by this producer) may hold any drop of its hour: the hour's start.
 */
export function firstDropOfKey(key: string, hour: number): number {
  const m = /\/(\d{13})-[^/]*$/.exec(key);
  return m ? Number(m[1]) : hour;
}

/** A batch id that is safe in a key: letters, digits, `-` and `_` only. */
export function isBatchId(s: unknown): s is string {
  return typeof s === "string" && /^[A-Za-z0-9_-]{1,64}$/.test(s);
}
