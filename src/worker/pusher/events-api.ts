/**
 * The Pusher HTTP API's events (docs/api.md, "The Pusher door"): `POST /apps/{id}/events` and
 * `POST /apps/{id}/batch_events`, as the `pusher` server libraries send them. Each channel's copy of
 * an event is a publish (the same pipeline as `POST /v1/publish`, src/worker/publish-one.ts): charged
 * to the publish budget with the app key as its subject, throttled (`"priority":"high"` never is) and
 * delivered or recorded as dropped; `socket_id` excludes that connection. Every event is checked, and
 * every copy's budget charged, before any is published: a refusal publishes nothing. The copies of a
 * request (every event of a batch) are charged as one: all their tokens taken, or none and 429. The
 * answer is Pusher's (`{}`, or `info`'s counts) with a `floodgate` member saying each copy's fate.
 *
 * Copies go to different objects, so one can fail (503) while others are delivered. A request none
 * of whose copies was taken answers that 503: nothing happened, so a retry is safe. Once any copy is
 * taken (delivered, or dropped and recorded), the answer is 200 and the failed copies' fates say
 * `unavailable` with their reason, each counted as a refusal: a 503 then would have a retrying
 * server library deliver the taken copies twice (the Pusher API has no Idempotency-Key), so the
 * answer names what to send again instead. `info` counts are read after delivery; a channel whose
 * counts cannot be read is left out of them rather than failing a request that delivered.
 */
import type { Context } from "hono";
import { type Budget, publishBudget } from "../../limiter/budgets";
import { type Denial, denialParts } from "../../limiter/denials";
import { isAnalytics, summaryFor } from "../../settings/rules";
import type { Settings } from "../../settings/settings";
import { type ChannelName, parseChannelName } from "../../wire/channel-names";
import { ApiError, isUnavailableReason, REFUSAL_HEADER, type UnavailableReason } from "../../wire/errors";
import { EVENT_NAME_MAX, eventMetaText, pusherEventSize, reservedEventName } from "../../wire/pusher/event-meta";
import { checkPusherName, isPresence, pusherChannel } from "../../wire/pusher/names";
import type { AppEnv } from "../app-env";
import { throttleAndDeliver } from "../publish-one";
import { audienceOf } from "../shards/audience";
import { pusherChannelCounts } from "./channel-counts";
import { PusherHttpError } from "./signed-request";
import { pusherSummaryKey } from "./summary-key";

/** Most channels one event goes to, and most events in one batch. */
export const EVENT_CHANNELS_MAX = 100;
export const BATCH_MAX = 10;

/** One event, checked. */
export interface ApiEvent {
  name: string;
  data: string;
  /** Its message body, `{"event","data"}`: made once, shared by every channel's copy. */
  body: string;
  channels: string[];
  socketId: string | null;
  info: string[];
  priority: boolean;
}

/**
 * A copy's fate, as the answer's `floodgate` member says it: `unavailable` only beside a copy that
 * was taken (else the request answers 503), naming the 503's reason (`Floodgate-Refusal`).
 */
export type Fate =
  | { status: "delivered"; epoch: string; seq: number }
  | { status: "dropped" }
  | { status: "unavailable"; reason: UnavailableReason };

const INFO_ATTRIBUTES = new Set(["subscription_count", "user_count"]);

/** Reads one event of a body (`batch` items name one `channel`). @throws PusherHttpError 400, 413 */
export function readApiEvent(value: unknown, maxMessageBytes: number, batchItem: boolean): ApiEvent {
  if (value === null || typeof value !== "object" || Array.isArray(value)) throw bad("an event must be a JSON object");
  const o = value as Record<string, unknown>;
  if (typeof o.name !== "string" || o.name.length === 0 || o.name.length > EVENT_NAME_MAX) {
    throw bad(`"name" must be a string of 1 to ${EVENT_NAME_MAX} characters`);
  }
  const reserved = reservedEventName(o.name);
  if (reserved) throw bad(`"name": ${reserved}`);
  if (typeof o.data !== "string") throw bad('"data" must be a string');
  // The bound is on `data` as sent, as Pusher's; its stored body, {"event","data"} with `data`
  // JSON-escaped, may be up to twice as long (pusherBodyMax).
  const size = pusherEventSize(o.name, o.data, maxMessageBytes);
  if (size.problem) throw new PusherHttpError(413, size.problem);
  const channels = batchItem
    ? [o.channel]
    : o.channels !== undefined
      ? o.channels
      : o.channel !== undefined
        ? [o.channel]
        : undefined;
  if (!Array.isArray(channels) || channels.length === 0 || channels.length > EVENT_CHANNELS_MAX) {
    throw bad(
      batchItem ? '"channel" must be a channel name' : `"channels" must list 1 to ${EVENT_CHANNELS_MAX} channels`,
    );
  }
  for (const ch of channels) {
    const problem = typeof ch === "string" ? checkPusherName(ch) : "a channel name must be a string";
    if (problem) throw bad(`${JSON.stringify(ch)}: ${problem}`);
  }
  if (new Set(channels).size !== channels.length) throw bad("a channel is listed twice");
  if (o.socket_id !== undefined && (typeof o.socket_id !== "string" || !/^\d+\.\d+$/.test(o.socket_id))) {
    throw bad('"socket_id" must be a socket id such as "123.456"');
  }
  if (o.info !== undefined && typeof o.info !== "string") throw bad('"info" must be a comma-separated string');
  const info = o.info ? (o.info as string).split(",").map((a) => a.trim()) : [];
  for (const a of info)
    if (!INFO_ATTRIBUTES.has(a)) throw bad(`"info" may name subscription_count and user_count, not ${a}`);
  if (o.priority !== undefined && o.priority !== "high" && o.priority !== "normal") {
    throw bad('"priority" must be "high" or "normal"');
  }
  return {
    name: o.name,
    data: o.data,
    body: size.body,
    channels: channels as string[],
    socketId: (o.socket_id as string | undefined) ?? null,
    info,
    priority: o.priority === "high",
  };
}

function bad(message: string): PusherHttpError {
  return new PusherHttpError(400, message);
}

/** One copy: the channel, its object's key and shard. */
interface Copy {
  event: ApiEvent;
  name: string;
  channel: ChannelName;
  key: string;
  shard: string | null;
}

/**
 * Charges every copy of `events` to the publish budget (the app key as subject), then publishes them
 * all; answers each event's fates (and `info` counts) by channel, in order. @throws PusherHttpError 429
 */
export async function publishEvents(
  c: Context<AppEnv>,
  appKey: string,
  events: ApiEvent[],
): Promise<{ fates: Record<string, Fate>[]; info: (Record<string, Record<string, number>> | null)[] }> {
  const svc = c.get("svc");
  const copies: Copy[][] = events.map((event) =>
    event.channels.map((name) => {
      const channel = parseChannelName(pusherChannel(name));
      const { key, shard } = audienceOf(svc.config, channel, null, c.req.raw);
      return { event, name, channel, key, shard };
    }),
  );
  const all = copies.flat();
  // A Pusher-named ANALYTICS_CHANNEL is the record too: only Floodgate writes it (docs/api.md, Bounds).
  const record = all.find((copy) => isAnalytics(svc.config, copy.channel));
  if (record) throw new PusherHttpError(403, `${record.name} is the analytics channel: only Floodgate writes it`);
  await chargeCopies(c, appKey, all);
  const failures: ApiError[] = [];
  const fates = await Promise.all(
    copies.map(async (list) => {
      const out: Record<string, Fate> = {};
      await Promise.all(
        list.map(async (copy) => {
          out[copy.name] = await publishCopy(c, appKey, copy).catch((e: unknown) => {
            const failure = unavailableOnly(e);
            failures.push(failure);
            return { status: "unavailable", reason: reasonOf(failure) } as const;
          });
        }),
      );
      return out;
    }),
  );
  if (failures.length === all.length) throw failures[0] as ApiError;
  for (const f of failures) {
    svc.metrics.inc("floodgate_refusals_total", { reason: reasonOf(f) });
  }
  const info = await Promise.all(
    copies.map(async (list) => {
      if (list[0]?.event.info.length === 0) return null;
      const out: Record<string, Record<string, number>> = {};
      await Promise.all(
        list.map(async (copy) => {
          const counts = await countsOf(c.env, svc.config, copy, copy.event.info).catch((e: unknown) => {
            unavailableOnly(e);
            return null;
          });
          if (counts) out[copy.name] = counts;
        }),
      );
      return out;
    }),
  );
  return { fates, info };
}

/**
 * Charges `copies` to the publish budget as one request: per bucket (the app key's, or a per-channel
 * rule's) one whole charge of its copies, so a 429 takes nothing. When a request spans buckets and one
 * refuses, the tokens the others took are given back (off the response path).
 * @throws PusherHttpError 429; ApiError 500 when the limiter fails
 */
async function chargeCopies(c: Context<AppEnv>, appKey: string, copies: Copy[]): Promise<void> {
  const { config, gate } = c.get("svc");
  const buckets = new Map<string, Budget & { tokens: number }>();
  for (const copy of copies) {
    const budget = publishBudget(config, copy.channel, appKey);
    const known = buckets.get(budget.key);
    if (known) known.tokens++;
    else buckets.set(budget.key, { ...budget, tokens: 1 });
  }
  const list = [...buckets.values()];
  const charged = await Promise.allSettled(
    list.map((b) => gate.chargeAll("publish", b.key, b.limit, b.tokens, c.var.defer)),
  );
  const admitted = (r: (typeof charged)[number]) => r.status === "fulfilled" && !r.value.denial;
  if (charged.every(admitted)) return;
  charged.forEach((r, i) => {
    const b = list[i] as (typeof list)[number];
    if (admitted(r)) c.var.defer(gate.giveBack("publish", b.key, b.limit, b.tokens));
  });
  const failed = charged.find((r) => r.status === "rejected");
  if (failed) throw failed.reason;
  // The denial that lasts longest says when to retry; its RateLimit fields name the publish budget,
  // which is also how /metrics counts this refusal (src/worker/http/refusals.ts).
  let longest: Denial | null = null;
  for (const r of charged) {
    const denial = r.status === "fulfilled" ? r.value.denial : undefined;
    if (denial && (!longest || denial.retryAfterMs > longest.retryAfterMs)) longest = denial;
  }
  throw new PusherHttpError(
    429,
    "Rate limit exceeded (the publish budget of the app key)",
    denialParts(longest as Denial).headers,
  );
}

/**
 * `e` when it is a 503 (a channel unreachable, the isolate's waiting publishes at their cap): one
 * copy's fate, or one channel's counts left out. Anything else is a fault of the request, rethrown
 * (the app's 500).
 */
function unavailableOnly(e: unknown): ApiError {
  if (!(e instanceof ApiError) || e.status !== 503) throw e;
  return e;
}

/** The reason a copy's 503 names (`Floodgate-Refusal`), `unavailable` when it names none. */
function reasonOf(e: ApiError): UnavailableReason {
  const named = e.headers[REFUSAL_HEADER];
  return isUnavailableReason(named) ? named : "unavailable";
}

async function publishCopy(c: Context<AppEnv>, appKey: string, copy: Copy): Promise<Fate> {
  const svc = c.get("svc");
  const { event } = copy;
  const summary = summaryFor(svc.config, copy.channel);
  const meta = event.socketId === null ? undefined : eventMetaText({ exclude: event.socketId });
  const outcome = await throttleAndDeliver(
    svc,
    {
      channel: copy.channel,
      key: copy.key,
      shard: copy.shard,
      messageJson: event.body,
      publisher: appKey,
      priority: event.priority,
      // Taken only if this copy is dropped, as a client event's (src/worker/pusher/publisher.ts).
      ...(summary ? { dropKey: () => pusherSummaryKey(event.name, event.data, summary.tokens) } : {}),
      ...(meta ? { meta } : {}),
    },
    c.var.defer,
  );
  return outcome.status === "delivered"
    ? { status: "delivered", epoch: outcome.epoch, seq: outcome.seq }
    : { status: "dropped" };
}

/**
 * `info`'s counts of one channel: `subscription_count` (either door), `user_count` (presence members),
 * the whole channel's over every shard (./channel-counts.ts), not the copy's shard's.
 */
async function countsOf(
  env: Env,
  config: Settings,
  copy: { name: string; channel: ChannelName },
  info: readonly string[],
): Promise<Record<string, number>> {
  const members = info.includes("user_count") && isPresence(copy.name);
  const counts = await pusherChannelCounts(env, config, copy.channel, { members, users: 0 });
  const out: Record<string, number> = {};
  if (info.includes("subscription_count")) out.subscription_count = counts.subscriptions;
  if (members) out.user_count = counts.members;
  return out;
}
