/**
 * The path of a copy of a dropped message (docs/operations.md, "The record of dropped messages"):
 * the isolate's batches (functions/drop-copies.ts) go to `DROPS_QUEUE`, many copies to a queue
 * message (src/worker/drops/record-producer.ts); this Worker consumes the queue, writes each message to RECORD_BUCKET (src/worker/record/record-objects.ts)
 * and then hands its copies to the analytics channel, the record's live view. A message the
 * consumer could not finish after the queue's retries reaches the dead-letter queue, whose consumer
 * counts each copy that is not in the bucket as failed.
 *
 * Counts, so that dropped = floodgate_record_copies_total + floodgate_record_failures_total once
 * settled: a copy is recorded when its object is first written, failed when the queue refuses it,
 * when it is too large for a queue message, or when its dead letter finds its object missing.
 */
import { copyKey, serialiseCopy } from "../../../functions/drop-copies";
import { isBatchId, type RecordBatch, type RecordCopy, splitByHour } from "../../../functions/record-batch";
import { countedChannelStub, type Services, services } from "../services";
import { recordedParts, writeBatch } from "./record-objects";

/** The queue's dead-letter queue (wrangler.toml): its batches are counted, never written. */
export const DEAD_LETTER_QUEUE = "floodgate-drops-dlq";

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

async function appendToAnalytics(env: Env, batch: RecordBatch): Promise<void> {
  // In drop-time order, as the record holds them.
  const copies = splitByHour(batch.batch, batch.copies).flatMap((p) => p.copies);
  await countedChannelStub(env, batch.analytics).appendCopies(
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

/**
 * The consumer of `DROPS_QUEUE`. Each message is written to the record, then appended to the
 * analytics channel; it is acknowledged only when both are done, else retried by the queue (whose
 * redelivery overwrites the same objects, counted once). A body that is no batch is acknowledged
 * and logged: nothing in it can be recorded or counted.
 */
export async function consumeDrops(batch: MessageBatch<unknown>, env: Env, ctx: ExecutionContext): Promise<void> {
  const svc = services(env);
  await Promise.all(batch.messages.map((msg) => consumeOne(svc, env, msg)));
  svc.metrics.schedule((p) => ctx.waitUntil(p));
}

async function consumeOne(svc: Services, env: Env, msg: Message<unknown>): Promise<void> {
  const body = parseBatch(msg.body);
  if (!body) {
    console.error(`floodgate record: queue message ${msg.id} is not a batch of copies; dropped`);
    msg.ack();
    return;
  }
  try {
    await writeBatch(
      env.RECORD_BUCKET,
      body,
      (n) => svc.metrics.inc("floodgate_record_copies_total", {}, n),
      () => svc.metrics.inc("floodgate_record_objects_written_total"),
    );
  } catch (e) {
    console.error(
      `floodgate record: could not write batch ${body.batch} (${body.copies.length} copies, attempt ${msg.attempts}); retrying`,
      e instanceof Error ? e.message : e,
    );
    msg.retry();
    return;
  }
  try {
    await appendToAnalytics(env, body);
    svc.metrics.inc("floodgate_analytics_copies_total", {}, body.copies.length);
  } catch (e) {
    console.error(
      `floodgate record: batch ${body.batch} is recorded but did not reach ${body.analytics} (attempt ${msg.attempts}); retrying`,
      e instanceof Error ? e.message : e,
    );
    msg.retry();
    return;
  }
  msg.ack();
}

/**
 * The consumer of the dead-letter queue: batches the queue gave up on. Copies whose hour's object is
 * in the bucket were recorded (it was the analytics channel that failed) and count only as copies
 * the live view missed; the others are the record's failures, counted, logged with their source
 * channel and ids, and told to their source channel. A bucket that cannot answer retries the letter.
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
      let parts: { recorded: RecordCopy[]; missing: RecordCopy[] };
      try {
        parts = await recordedParts(env.RECORD_BUCKET, body);
      } catch (e) {
        console.error(`floodgate record: cannot check dead batch ${body.batch}`, e instanceof Error ? e.message : e);
        msg.retry();
        return;
      }
      svc.metrics.inc("floodgate_analytics_copy_failures_total", {}, body.copies.length);
      svc.metrics.inc("floodgate_record_failures_total", {}, parts.missing.length);
      if (parts.missing.length > 0) await reportFailed(env, parts.missing);
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
