/**
 * The publish side: one JSON value sent with an `Idempotency-Key` (one per call, reused by its
 * retries, so a retry never duplicates), 429s retried after `Retry-After`, 5xx and network errors
 * after capped, jittered backoff, and a 202 (dropped) taken as an answer, never retried.
 */
import { FloodgateError, RateLimitedError, toError } from "./errors.js";
import type { Session } from "./session.js";

/** A publish's answer (docs/api.md): delivered with its seq, or dropped by the throttle. */
export type PublishResult =
  /** `shard`: on a sharded channel, the shard the message went into (docs/api.md, "Shards"). */
  | {
      status: "delivered";
      channel: string;
      shard?: string;
      /** The numbering `seq` counts in (docs/api.md, "Numbering restarts"). */
      epoch: string;
      seq: number;
      id: string;
      published_at: number;
    }
  | { status: "dropped" };

/** A broadcast's answer (`shard: "*"`): the shards it was delivered into, each with its own seq. */
export interface BroadcastResult {
  status: "delivered";
  channel: string;
  shards: string[];
  published_at: number;
}

export interface PublishOptions {
  /** Default: a fresh random key per call, reused by that call's retries. */
  idempotencyKey?: string;
  /** Overrides the client's `maxRetries` for this call. */
  retries?: number;
  /**
   * `high` (a token with the `priority` scope): never dropped by the throttle, sent as
   * `Floodgate-Priority: high`. Default: an ordinary publish.
   */
  priority?: "high" | "normal";
  /**
   * `Floodgate-Shard` (a token with the `broadcast` scope, on a sharded channel): `"*"` delivers into
   * every shard with subscribers or history, a shard's name into that shard.
   */
  shard?: string;
}

/** Publishes one JSON value. Resolves with the delivery or the drop; rejects with a FloodgateError. */
export async function publish(
  session: Session,
  channel: string,
  data: unknown,
  options: PublishOptions = {},
): Promise<PublishResult | BroadcastResult> {
  const key = options.idempotencyKey ?? randomKey();
  const retries = options.retries ?? session.opts.maxRetries ?? 5;
  const body = JSON.stringify(data);
  let refreshedAfter401 = false;
  for (let attempt = 0; ; attempt++) {
    await session.freshToken();
    let res: Response;
    try {
      res = await session.fetchFn(`${session.baseUrl}/v1/publish/${channel}`, {
        method: "POST",
        headers: {
          "content-type": "application/json",
          "idempotency-key": key,
          ...(options.priority ? { "floodgate-priority": options.priority } : {}),
          ...(options.shard !== undefined ? { "floodgate-shard": options.shard } : {}),
          ...(session.accessToken ? { authorization: `Bearer ${session.accessToken}` } : {}),
        },
        body,
      });
    } catch (e) {
      if (attempt >= retries) throw new FloodgateError(0, "network", `publish failed: ${String(e)}`);
      await session.sleep(session.backoff(attempt));
      continue;
    }
    if (res.status === 200 || res.status === 202) return (await res.json()) as PublishResult | BroadcastResult;
    const error = await toError(res);
    if (error.status === 401 && session.refreshToken && !refreshedAfter401) {
      refreshedAfter401 = true;
      await session.refresh();
      attempt--; // a refresh is not a retry
      continue;
    }
    const retryable = error instanceof RateLimitedError || error.status >= 500;
    if (!retryable || attempt >= retries) throw error;
    const wait = error instanceof RateLimitedError ? error.retryAfterMs : session.backoff(attempt);
    await session.sleep(session.jitter(Math.min(wait, session.maxBackoff())));
  }
}

function randomKey(): string {
  return crypto.randomUUID();
}
