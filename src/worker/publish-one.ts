/**
 * One publish after its checks and its budget (docs/api.md, POST /v1/publish, steps 2 and 3): the
 * before-publish throttle (a priority message never meets it), then delivery, or the drop counted and
 * its copy sent to the record. Shared by `POST /v1/publish`, the Pusher HTTP API's events and Pusher
 * client events (src/worker/pusher/), so a message is throttled, recorded and counted the same way
 * whichever door it came through.
 */
import { beforePublish } from "../../functions/before-publish";
import type { QueuedCopy } from "../../functions/drop-copies";
import type { PublishOutcome } from "../channel/calls";
import { thinningFor } from "../settings/rules";
import type { ChannelName } from "../wire/channel-names";
import { orUnavailable } from "./http/errors";
import type { Services } from "./services";

export interface OnePublish {
  channel: ChannelName;
  /** The object that takes it: the channel's, or its shard's (docs/api.md, "Shards"). */
  key: string;
  shard: string | null;
  /** The message as minified JSON text. */
  messageJson: string;
  /**
   * Its key for the channel's summary of drops, when the channel has a summary rule: the key, or how
   * to take it when it is dropped (a client event's is read back from its stored body, work a
   * delivered event never needs).
   */
  dropKey?: string | (() => string);
  publisher: string;
  priority?: boolean;
  idempotencyKey?: string;
  /** A Pusher event's delivery details (src/wire/pusher/event-meta.ts). */
  meta?: string;
}

/** What became of it: delivered (with the channel's answer) or dropped by the throttle. */
export type OneOutcome = Extract<PublishOutcome, { status: "delivered" }> | { status: "dropped"; replayed: boolean };

/** Throttles and delivers `p` (see the module comment). @throws ApiError 503 when the channel is unavailable */
export async function throttleAndDeliver(
  svc: Services,
  p: OnePublish,
  defer: (promise: Promise<unknown>) => void,
): Promise<OneOutcome> {
  const { config } = svc;
  const decision = p.priority
    ? ({ action: "deliver", rate: 0 } as const)
    : await beforePublish(p.key, {
        reader: svc.reader,
        analyticsChannel: config.analyticsChannel.name,
        thinning: thinningFor(config, p.channel) ? svc.thinning : null,
      });
  const now = Date.now();
  // Where the drop is decided, its key for the channel's summary (docs/api.md, "Summaries of drops").
  const summaryKey = decision.action !== "drop" ? undefined : typeof p.dropKey === "function" ? p.dropKey() : p.dropKey;
  const copy = (counted: boolean): QueuedCopy => ({
    id: crypto.randomUUID(),
    source_channel: p.channel.name,
    ...(p.shard === null ? {} : { shard: p.shard }),
    message: p.messageJson,
    publisher: p.publisher,
    drop_rate: decision.rate,
    dropped_at: now,
    counted,
    ...(summaryKey !== undefined ? { summary_key: summaryKey } : {}),
  });

  if (decision.action === "drop" && !p.idempotencyKey) {
    // The common drop: no object call on the response path; copy and count happen in the background.
    svc.metrics.inc("floodgate_messages_total", { result: "dropped" });
    // Only handed to waitUntil, never continued from here: the batch may belong to another request,
    // and code chained on another request's promise would run in that request's context.
    defer(svc.drops.enqueue(copy(false)));
    return { status: "dropped", replayed: false };
  }

  const outcome = await orUnavailable<PublishOutcome>(
    "channel",
    () =>
      svc.publishBatcher.publish(
        {
          channel: p.key,
          data: p.messageJson,
          publisher: p.publisher,
          action: decision.action,
          now,
          ...(p.priority ? { priority: true } : {}),
          ...(summaryKey !== undefined ? { summaryKey } : {}),
          ...(p.idempotencyKey ? { idempotencyKey: p.idempotencyKey } : {}),
          ...(p.meta ? { meta: p.meta } : {}),
        },
        defer,
      ),
    "retry with the same Idempotency-Key",
  );
  if (outcome.status === "dropped") {
    if (!outcome.replayed) {
      svc.metrics.inc("floodgate_messages_total", { result: "dropped" });
      defer(svc.drops.enqueue(copy(true)));
    }
    return outcome;
  }
  if (!outcome.replayed) svc.metrics.inc("floodgate_messages_total", { result: "delivered" });
  return outcome;
}
