/**
 * Client events (docs/api.md, "The Pusher door"): `{"event":"client-<name>","channel","data"}` from a
 * connection subscribed to a private or presence channel is a publish by that connection. Refused
 * here, with a `pusher:error` and nothing delivered: on a public or unsubscribed channel, on a
 * Pusher-named `ANALYTICS_CHANNEL`, with data over `MAX_MESSAGE_BYTES` or a stored body over its
 * bound (src/wire/pusher/event-meta.ts) (4300), past `PUSHER_CLIENT_EVENTS_RATE` for the connection
 * (4301). Else
 * it goes through the Worker's own publish pipeline — the publish budget, the before-publish throttle,
 * the record of drops, the metrics — by the RPC entrypoint `Publisher` (src/worker/pusher/publisher.ts,
 * reached through `ctx.exports`, so no object imports the Worker's code), carrying the sender's
 * socket id: the event reaches every other subscriber, never the sender, and on a presence channel
 * with its `user_id`.
 */
import { type BucketState, fullBucket, take } from "../limiter/token-bucket";
import { isAnalytics } from "../settings/rules";
import { settingsOf } from "../settings/settings";
import { PUSHER_BAD_FRAME, PUSHER_CLIENT_EVENT_RATE } from "../wire/pusher/codes";
import { pusherEventSize } from "../wire/pusher/event-meta";
import { pusherChannel, pusherVisibility } from "../wire/pusher/names";
import type { ConnectionAttachment } from "./connections";
import type { HostLane } from "./lane";

/** What client events need of the host. */
export interface EventingHost {
  channelsOf(ws: WebSocket): Map<string, string>;
  lane(key: string): HostLane | undefined;
  attachment(ws: WebSocket): ConnectionAttachment | null;
  error(ws: WebSocket, code: number, message: string): void;
}

export class ClientEvents {
  /** Each connection's client-event budget (memory only). */
  private readonly budgets = new WeakMap<WebSocket, BucketState>();
  /** Each connection's publishes, one after another: its events arrive in the order it sent them. */
  private readonly queues = new WeakMap<WebSocket, Promise<void>>();

  constructor(
    private readonly ctx: DurableObjectState,
    private readonly env: Env,
    private readonly host: EventingHost,
  ) {}

  async publish(ws: WebSocket, event: string, channel: string, data: string): Promise<void> {
    const host = this.host;
    if (pusherVisibility(channel) !== "private") {
      return host.error(ws, PUSHER_BAD_FRAME, "client events are only for private and presence channels");
    }
    const key = host.channelsOf(ws).get(channel);
    const sub = key === undefined ? undefined : host.lane(key)?.subs.get(ws);
    const a = host.attachment(ws);
    if (key === undefined || !sub || sub.joining || !a) {
      return host.error(ws, PUSHER_BAD_FRAME, `client event on ${channel}, which this connection is not subscribed to`);
    }
    const settings = settingsOf(this.env);
    // A Pusher-named ANALYTICS_CHANNEL is the record: its readers may not write it (docs/api.md, Bounds).
    if (isAnalytics(settings, pusherChannel(channel))) {
      return host.error(ws, PUSHER_BAD_FRAME, `${channel} is the analytics channel: only Floodgate writes it`);
    }
    // Bounded as the HTTP API's events are (src/worker/pusher/events-api.ts): `data` as sent.
    const { body, problem } = pusherEventSize(event, data, settings.maxMessageBytes);
    if (problem) return host.error(ws, PUSHER_BAD_FRAME, `client event: ${problem} (MAX_MESSAGE_BYTES)`);
    const limit = settings.pusher.clientEvents;
    if (limit) {
      const now = Date.now();
      const d = take(this.budgets.get(ws) ?? fullBucket(limit, now), limit, now);
      this.budgets.set(ws, d.state);
      if (!d.allowed) {
        return host.error(ws, PUSHER_CLIENT_EVENT_RATE, "client event rejected: over PUSHER_CLIENT_EVENTS_RATE");
      }
    }
    const call = { channel: pusherChannel(channel), key, body, socketId: a.id, userId: sub.userId };
    const run = (this.queues.get(ws) ?? Promise.resolve()).then(async () => {
      try {
        const answer = await this.ctx.exports.Publisher.clientEvent(call);
        if ("refused" in answer) host.error(ws, PUSHER_CLIENT_EVENT_RATE, answer.refused);
      } catch (e) {
        console.error("floodgate host: a client event could not be published", e instanceof Error ? e.message : e);
        host.error(ws, PUSHER_BAD_FRAME, "client event not delivered: the channel is temporarily unavailable");
      }
    });
    this.queues.set(ws, run);
    await run;
  }
}
