/**
 * The path of a copy of a dropped message (docs/operations.md, "The record of dropped messages"):
 * the isolate's batches (functions/drop-copies.ts) go to `DROPS_QUEUE`, many copies to a queue
 * message (src/worker/drops/record-producer.ts); this Worker consumes the queue, writes what one
 * invocation takes to RECORD_BUCKET, an object per hour (src/worker/record/record-objects.ts), and then
 * hands each message's copies to the analytics channel, the record's live view. Retries back off; a
 * message the consumer could not finish after the queue's retries reaches the dead-letter queue, whose
 * consumer counts each copy that is not in the bucket as failed.
 *
 * Counts, so that dropped = floodgate_record_copies_total + floodgate_record_failures_total once
 * settled: a copy is recorded when the one object that holds it is written, failed when the queue
 * refuses it, when it is too large for a queue message or turned away by a full isolate queue (those
 * counted by the producer, src/worker/services.ts), or when its dead letter finds its hour missing.
 * And so that dropped = copies on the analytics channel (kept + expired) +
 * floodgate_analytics_copy_failures_total: the producer counts there too what never reached the
 * queue, and the dead-letter consumer every copy of a letter; the queue carries only what the
 * producer sent, so no copy is counted in both places.
 */
import { copyKey, serialiseCopy } from "../../../functions/drop-copies";
import {
  combineByHour,
  isBatchId,
  type RecordBatch,
  type RecordCopy,
  retryDelaySeconds,
  splitByHour,
} from "../../../functions/record-batch";
import { countedChannelStub, services } from "../services";
import { recordedParts, writeObjects } from "./record-objects";

/** The queue's dead-letter queue (wrangler.toml): its batches are counted, never written. */
export const DEAD_LETTER_QUEUE = "floodgate-drops-dlq";
/** The dead-letter consumer's `max_retries` in wrangler.toml, plus its first delivery. */
export const DEAD_LETTER_ATTEMPTS = 21;

/** A queue message's body as a batch, or null when it is not one (nothing to record from it). */
export function parseBatch(body: unknown): RecordBatch | null {
  if (typeof body !== "object" || body === null) return null;
  const b = body as Partial<RecordBatch>;
  if (!isBatchId(b.batch) || typeof b.analytics !== "string" || !Array.isArray(b.copies)) return null;
  const ok = b.copies.every(
    (c) =>
      typeof c === "object" &&
      c !== null &&
      typeof c.id === "string" &&
      typeof c.source_channel === "string" &&
      (c.shard === undefined || typeof c.shard === "string") &&
      typeof c.message === "string" &&
      typeof c.publisher === "string" &&
      typeof c.drop_rate === "number" &&
      Number.isSafeInteger(c.dropped_at),
  );
  return ok ? (b as RecordBatch) : null;
}

/** Appends a message's copies to the analytics channel; answers how many it did not hold already. */
async function appendToAnalytics(env: Env, batch: RecordBatch): Promise<number> {
  // In drop-time order, as the record holds them.
  const copies = splitByHour(batch.batch, batch.copies).flatMap((p) => p.copies);
  return countedChannelStub(env, batch.analytics).appendCopies(
    batch.analytics,
    copies.map((c) => ({
      id: c.id,
      data: serialiseCopy(c),
      publisher: c.publisher,
      source_channel: c.source_channel,
      dropped_at: c.dropped_at,
    })),
    Date.now(),
  );
}

/** The consumer's retries of a message wait 5 s, then twice as long each time (functions/record-batch.ts). */
export const RETRY_BASE_SECONDS = 5;
export const RETRY_MAX_SECONDS = 300;
/** The dead-letter consumer's retries (the bucket did not answer): 30 s doubling up to an hour. */
export const DEAD_LETTER_RETRY_BASE_SECONDS = 30;
export const DEAD_LETTER_RETRY_MAX_SECONDS = 3600;

const retryLater = (msg: Message<unknown>) =>
  msg.retry({ delaySeconds: retryDelaySeconds(msg.attempts, RETRY_BASE_SECONDS, RETRY_MAX_SECONDS) });

/**
 * The consumer of `DROPS_QUEUE`. Every message's copies go to the record, one object per UTC hour for
 * the whole invocation (not one per message), then each message's copies are appended to the
 * analytics channel; a message is acknowledged once both are done, else retried after a growing delay
 * ({@link RETRY_BASE_SECONDS}). A message delivered again writes only the hours of it not yet
 * recorded, and the analytics channel skips copies it holds, so no copy is recorded or shown twice.
 * A body that is no batch is acknowledged and logged: nothing in it can be recorded or counted.
 */
export async function consumeDrops(batch: MessageBatch<unknown>, env: Env, ctx: ExecutionContext): Promise<void> {
  const svc = services(env);
  const items: { msg: Message<unknown>; body: RecordBatch; todo: RecordCopy[] }[] = [];
  for (const msg of batch.messages) {
    const body = parseBatch(msg.body);
    if (body) items.push({ msg, body, todo: body.copies });
    else {
      console.error(`floodgate record: queue message ${msg.id} is not a batch of copies; dropped`);
      msg.ack();
    }
  }
  // Delivered before: leave out the hours already recorded (by an invocation that then failed).
  const again = items.filter((it) => it.msg.attempts > 1);
  let pending = items;
  if (again.length > 0) {
    try {
      const found = await recordedParts(
        env.RECORD_BUCKET,
        again.map((it) => it.body),
      );
      again.forEach((it, i) => {
        it.todo = (found[i]?.missing ?? []).flatMap((p) => p.copies);
      });
    } catch (e) {
      console.error("floodgate record: cannot tell what is recorded; retrying", e instanceof Error ? e.message : e);
      for (const it of again) retryLater(it.msg);
      pending = items.filter((it) => it.msg.attempts <= 1);
    }
  }
  const objects = combineByHour(
    pending.map((it) => ({ batch: it.body.batch, copies: it.todo })),
    crypto.randomUUID(),
  );
  const written = await writeObjects(
    env.RECORD_BUCKET,
    objects,
    (n) => svc.metrics.inc("floodgate_record_copies_total", {}, n),
    () => svc.metrics.inc("floodgate_record_objects_written_total"),
  );
  const failedBatches = new Set(objects.filter((o) => !written.has(o.key)).flatMap((o) => o.batches));
  await Promise.all(
    pending.map(async ({ msg, body }) => {
      if (failedBatches.has(body.batch)) {
        console.error(
          `floodgate record: batch ${body.batch} (${body.copies.length} copies, attempt ${msg.attempts}) is not all recorded; retrying`,
        );
        retryLater(msg);
        return;
      }
      try {
        const appended = await appendToAnalytics(env, body);
        svc.metrics.inc("floodgate_analytics_copies_total", {}, appended);
      } catch (e) {
        console.error(
          `floodgate record: batch ${body.batch} is recorded but did not reach ${body.analytics} (attempt ${msg.attempts}); retrying`,
          e instanceof Error ? e.message : e,
        );
        retryLater(msg);
        return;
      }
      msg.ack();
    }),
  );
  svc.metrics.schedule((p) => ctx.waitUntil(p));
}

/**
 * The consumer of the dead-letter queue: batches the queue gave up on. Copies whose hour is in the
 * bucket were recorded (it was the analytics channel that failed) and count only as copies the live
 * view missed; the others are the record's failures, counted, logged with their source channel and
 * ids, and told to their source channel. A bucket that cannot answer retries the letter, after a
 * growing delay; on its last attempt ({@link DEAD_LETTER_ATTEMPTS}) a letter still unchecked is
 * counted whole as failed rather than deleted by the queue uncounted.
 */
export async function consumeDeadLetters(batch: MessageBatch<unknown>, env: Env, ctx: ExecutionContext): Promise<void> {
  const svc = services(env);
  await Promise.all(
    batch.messages.map(async (msg) => {
      const body = parseBatch(msg.body);
      if (!body) {
        console.error(`floodgate record: dead letter ${msg.id} is not a batch of copies; dropped`);
        msg.ack();
        return;
      }
      let missing: RecordCopy[];
      try {
        const [parts] = await recordedParts(env.RECORD_BUCKET, [body]);
        missing = (parts?.missing ?? []).flatMap((p) => p.copies);
      } catch (e) {
        console.error(`floodgate record: cannot check dead batch ${body.batch}`, e instanceof Error ? e.message : e);
        if (msg.attempts < DEAD_LETTER_ATTEMPTS) {
          msg.retry({
            delaySeconds: retryDelaySeconds(
              msg.attempts,
              DEAD_LETTER_RETRY_BASE_SECONDS,
              DEAD_LETTER_RETRY_MAX_SECONDS,
            ),
          });
          return;
        }
        console.error(
          `floodgate record: dead batch ${body.batch} still unchecked after ${msg.attempts} attempts: its ${body.copies.length} copies count as failed`,
        );
        missing = body.copies;
      }
      svc.metrics.inc("floodgate_analytics_copy_failures_total", {}, body.copies.length);
      svc.metrics.inc("floodgate_record_failures_total", {}, missing.length);
      if (missing.length > 0) await reportFailed(env, missing);
      msg.ack();
    }),
  );
  svc.metrics.schedule((p) => ctx.waitUntil(p));
}

/** Logs failed copies by source channel with their ids, and counts them on each source channel. */
async function reportFailed(env: Env, copies: RecordCopy[]): Promise<void> {
  const byChannel = new Map<string, string[]>();
  for (const c of copies) byChannel.set(copyKey(c), [...(byChannel.get(copyKey(c)) ?? []), c.id]);
  for (const [channel, ids] of byChannel)
    console.error(
      `floodgate record: ${ids.length} copies of drops on ${channel} failed after the queue's retries: ${ids.slice(0, 3).join(", ")}${ids.length > 3 ? ", …" : ""}`,
    );
  await Promise.all(
    [...byChannel].map(async ([channel, ids]) => {
      try {
        await countedChannelStub(env, channel).recordDrops(channel, 0, ids.length);
      } catch (e) {
        console.error(`floodgate: could not count failed copies on ${channel}`, e instanceof Error ? e.message : e);
      }
    }),
  );
}
