/**
 * `Publisher` — an RPC entrypoint of the Worker (exported from src/index.ts, never reachable over
 * HTTP) through which a connection host publishes a Pusher client event (src/connection-host/
 * client-events.ts): the same pipeline as `POST /v1/publish` — the publish budget of the sender
 * (its `user_id` on a presence channel, else its socket id), the before-publish throttle (a drop is
 * recorded), delivery and the metrics. Hosts reach it through `ctx.exports` (`enable_ctx_exports`),
 * so no object imports the Worker's code.
 */
import { WorkerEntrypoint } from "cloudflare:workers";
import { splitShardKey } from "../../../functions/shard-key";
import { publishBudget } from "../../limiter/budgets";
import { summaryFor } from "../../settings/rules";
import { parseChannelName } from "../../wire/channel-names";
import { eventMetaText } from "../../wire/pusher/event-meta";
import { throttleAndDeliver } from "../publish-one";
import { services } from "../services";
import { pusherSummaryKey } from "./summary-key";

/** One client event, as its connection host passes it. */
export interface ClientEventCall {
  /** The Floodgate channel (`pusher:N`). */
  channel: string;
  /** The object that takes it (a shard's key on a channel sharded by continent). */
  key: string;
  /** The event as stored, `{"event","data"}` (src/wire/pusher/event-meta.ts): made once, by the host's size check. */
  body: string;
  /** The sender's socket id: never sent its own event. */
  socketId: string;
  /** The sender's member id on a presence channel. */
  userId: string | null;
}

export type ClientEventAnswer = { status: "delivered" | "dropped" } | { refused: string };

export class Publisher extends WorkerEntrypoint<Env> {
  async clientEvent(e: ClientEventCall): Promise<ClientEventAnswer> {
    const svc = services(this.env);
    const defer = (p: Promise<unknown>) => this.ctx.waitUntil(p);
    try {
      const channel = parseChannelName(e.channel);
      const publisher = e.userId ?? e.socketId;
      const budget = publishBudget(svc.config, channel, publisher);
      const charged = await svc.gate.charge("publish", budget.key, budget.limit, defer);
      if (charged.denial) return { refused: "client event rejected: publish rate limit exceeded" };
      const messageJson = e.body;
      const summary = summaryFor(svc.config, channel);
      const meta = eventMetaText({ exclude: e.socketId, ...(e.userId !== null ? { user_id: e.userId } : {}) });
      const outcome = await throttleAndDeliver(
        svc,
        {
          channel,
          key: e.key,
          shard: splitShardKey(e.key).shard,
          messageJson,
          publisher,
          ...(summary ? { dropKey: () => summaryKeyOf(e.body, summary.tokens) } : {}),
          ...(meta ? { meta } : {}),
        },
        defer,
      );
      return { status: outcome.status };
    } finally {
      svc.metrics.schedule(defer);
    }
  }
}

/**
 * The key a dropped client event counts under in its channel's summary, read back from its body (what
 * the host checked and stored): asked for only when the event is dropped on a channel with a rule.
 */
function summaryKeyOf(body: string, tokens: Parameters<typeof pusherSummaryKey>[2]): string {
  const { event, data } = JSON.parse(body) as { event: string; data: string };
  return pusherSummaryKey(event, data, tokens);
}
