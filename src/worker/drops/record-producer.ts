/**
 * The producer side of the drops queue (docs/operations.md, "The record of dropped messages"): one
 * isolate batch of copies (functions/drop-copies.ts) packed into queue messages and sent. Apart from
 * the consumer (src/worker/record/record-queue.ts), which needs the Worker's services: the services need
 * this, so one module holding both would import itself in a circle.
 */
import type { QueuedCopy } from "../../../functions/drop-copies";
import { batchId, packCopies, type RecordBatch, type RecordCopy, sendGroups } from "../../../functions/record-batch";

const plain = (c: RecordCopy): RecordCopy => ({
  id: c.id,
  source_channel: c.source_channel,
  ...(c.shard === undefined ? {} : { shard: c.shard }),
  message: c.message,
  publisher: c.publisher,
  drop_rate: c.drop_rate,
  dropped_at: c.dropped_at,
});

/**
 * Sends one isolate batch to the queue: packed into messages below the queue's 128 KB, at most a
 * `sendBatch` call's 100 messages and 256 KB per call, the calls in parallel. Answers the copies not
 * taken: those of a refused call, and any copy too large for a message of its own. `sent` hears the
 * queue messages of each call the queue took.
 */
export async function sendToQueue(
  queue: Queue,
  analytics: string,
  copies: QueuedCopy[],
  sent: (messages: number) => void = () => {},
): Promise<QueuedCopy[]> {
  const { messages, tooLarge } = packCopies(copies);
  if (tooLarge.length > 0)
    console.error(
      `floodgate record: ${tooLarge.length} copies too large for a queue message (first: ${tooLarge[0]?.source_channel} ${tooLarge[0]?.id})`,
    );
  const refused: QueuedCopy[] = [...tooLarge];
  await Promise.all(
    sendGroups(messages).map(async (group) => {
      try {
        await queue.sendBatch(
          group.map((m) => ({
            body: {
              batch: batchId(m.copies, crypto.randomUUID()),
              analytics,
              copies: m.copies.map(plain),
            } satisfies RecordBatch,
          })),
        );
        sent(group.length);
      } catch (e) {
        console.error("floodgate record: the drops queue refused a send", e instanceof Error ? e.message : e);
        for (const m of group) refused.push(...m.copies);
      }
    }),
  );
  return refused;
}
