/**
 * The calling side of the rate limiter, in the Worker and in a connection host (src/connection-host/host-reads.ts),
 * beside the shards it asks: picks the bucket key and limit, answers from a lease or the
 * deny cache when it can, and otherwise asks the bucket's shard, batching requests whose keys share a
 * shard. One job each: src/limiter/isolate-leases.ts (leases), src/limiter/deny-cache.ts (cached denials),
 * src/limiter/denials.ts (what the response says); this module batches and decides.
 *
 * Coalescing: buckets live in shards, many keys to an object (src/limiter/limiter-shard.ts). Requests whose
 * keys share a shard and arrive while that shard's call is in flight go to it together as one
 * `decide` call (functions/coalescer.ts), one entry per key with its count (a whole charge, one
 * request of several tokens, all or none: an entry of its own). The shard still decides every
 * key's tokens against that key's own bucket (at most what it holds, in arrival order), so
 * strictness holds, but a crowd of subjects costs one round trip per batch instead of one per
 * request. A request whose batch never answers asks the shard itself after
 * `LIMITER_BATCHING.patienceMs`: that can charge it twice (once in the lost batch), never admit it twice.
 */

import { Coalescer, type CoalescerOptions, LOST } from "../platform/coalescer";
import type { Limit } from "../settings/limits";
import { ApiError } from "../wire/errors";
import type { BatchChargeResult, LeaseRequest } from "./bucket-charge";
import { type BucketName, type Denial, deniedError, rateLimitHeaders } from "./denials";
import { DenyCache } from "./deny-cache";
import { IsolateLeases } from "./isolate-leases";
import { type KeyCharge, shardOf } from "./limiter-shard";

/** What a shard answers for a batch of keys' charges, in order; backed by `LimiterShard.decide`. */
export interface BucketBackend {
  charge(shard: number, charges: KeyCharge[]): Promise<BatchChargeResult[]>;
}

/** Who answered: the bucket's object, this isolate's deny cache, or a lease this isolate holds. */
export type DecisionSource = "object" | "deny_cache" | "lease";

export interface GateEvents {
  decision(bucket: BucketName, allowed: boolean, source: DecisionSource): void;
  error(bucket: BucketName): void;
}

/** How charges to one shard are batched (functions/coalescer.ts, `CoalescerOptions`). */
export const LIMITER_BATCHING: CoalescerOptions = {
  /** Most requests one object call decides. */
  maxBatch: 1000,
  /** How long a batch with nothing ahead of it gathers company before it is sent, in ms. */
  gatherMs: 1,
  /** How long a batch waits for the call ahead of it before it is sent regardless, in ms. */
  stallMs: 1000,
  /** How long a follower waits for its batch before it asks the object itself, in ms. */
  patienceMs: 2000,
};

/**
 * The buckets whose charges may be given back ({@link LimiterGate.refund}): the admin-auth budget,
 * whose token a right bearer returns. They take no leases: a refund goes to the shard, where a
 * token spent from a lease would come back capped under that lease's hold and be lost.
 */
export type RefundableBucket = "admin-auth";
const REFUNDABLE: ReadonlySet<BucketName> = new Set<RefundableBucket>(["admin-auth"]);

/** `ctx.waitUntil`, so a batch's call outlives a leader whose client went away. */
export type Defer = (p: Promise<unknown>) => void;

/** One request's charge; every request in a batch has keys of the same shard. */
interface Charge {
  bucket: BucketName;
  key: string;
  limit: Limit;
  /** The key and limit together: what leases, demand and one entry of a shard call are kept by. */
  bucketId: string;
  /** Tokens it takes: 1, or a whole charge's count ({@link LimiterGate.chargeAll}), all or none. */
  tokens: number;
  whole: boolean;
}

/**
 * The requests of one batch that go to the shard as one entry: those of one key and limit, or one
 * whole charge alone.
 */
interface Entry {
  first: Charge;
  /** Their places in the batch, in arrival order. */
  at: number[];
  settle: LeaseRequest["settle"];
}

interface Answer {
  headers?: Record<string, string>;
  /** Denied: what the 429 says (kept as data: a flood's denials need no Error object each). */
  denial?: Denial;
  error?: unknown;
}

/** What {@link LimiterGate.charge} answers: the allowed response's headers, or the denial. */
export type Charged = { headers: Record<string, string>; denial?: undefined } | { denial: Denial };

/** What leases, demand and a shard call's entries are kept by: the key and its limit together. */
const bucketIdOf = (key: string, limit: Limit) => `${limit.rate}/${limit.perMs}/${limit.burst}|${key}`;

export class LimiterGate {
  private readonly deny = new DenyCache();
  private readonly leases = new IsolateLeases();
  /** Batches per shard. */
  private readonly batches = new Coalescer<Charge, Answer>(
    (shard, charges) => this.chargeBatch(charges, shard),
    LIMITER_BATCHING,
  );
  /** Object calls made, for the benchmark's calls-per-denial figure. */
  calls = 0;

  constructor(
    private readonly backend: BucketBackend,
    private readonly events: GateEvents,
    private readonly now: () => number = Date.now,
  ) {}

  /**
   * Charges one request to `key`. Returns the headers for the allowed response ({} when the budget is
   * disabled). @throws ApiError 429 when denied, 500 when the limiter fails (fail closed).
   */
  async check(bucket: BucketName, key: string, limit: Limit | null, defer?: Defer): Promise<Record<string, string>> {
    const charged = await this.charge(bucket, key, limit, defer);
    if (charged.denial) throw deniedError(charged.denial);
    return charged.headers;
  }

  /**
   * {@link check} for a route that answers a denial itself (the publish route, whose deny path is
   * a flood's): the same decision, with a denial returned as data instead of thrown as an ApiError,
   * so a denied request builds no Error and unwinds no handler. @throws ApiError 500 when the
   * limiter fails (fail closed).
   */
  async charge(bucket: BucketName, key: string, limit: Limit | null, defer?: Defer): Promise<Charged> {
    return this.decide(bucket, key, limit, 1, false, defer);
  }

  /**
   * Charges one request that takes `tokens` at once (an event's copies, each a publish): admitted
   * only if all are there, else denied taking none, never partly. From this isolate's leases when
   * together they hold `tokens`, else by one entry of its own in a shard call, decided against the
   * bucket all or nothing. Its denial is not cached (it says nothing of a request for fewer tokens);
   * a cached denial of the key answers it. @throws ApiError 500 when the limiter fails (fail closed).
   */
  async chargeAll(
    bucket: BucketName,
    key: string,
    limit: Limit | null,
    tokens: number,
    defer?: Defer,
  ): Promise<Charged> {
    return this.decide(bucket, key, limit, tokens, true, defer);
  }

  /**
   * Gives back the `tokens` a {@link chargeAll} took for a request that ended up not using them
   * (another of its budgets denied it): onto this isolate's lease of the key while one is being
   * spent, else with one call to the key's shard, not batched, meant to run off the response path.
   * Never rejects; a give-back that fails leaves the tokens spent, which can only under-admit.
   */
  async giveBack(bucket: BucketName, key: string, limit: Limit | null, tokens: number): Promise<void> {
    if (!limit || this.leases.giveBack(bucketIdOf(key, limit), this.now(), tokens)) return;
    await this.refundShard(bucket, key, limit, tokens);
  }

  private async decide(
    bucket: BucketName,
    key: string,
    limit: Limit | null,
    tokens: number,
    whole: boolean,
    defer?: Defer,
  ): Promise<Charged> {
    if (!limit) return { headers: {} };
    const now = this.now();
    const bucketId = bucketIdOf(key, limit);
    this.leases.note(bucketId, now, tokens);
    // Tokens already taken from the bucket are spent first, even past a cached denial.
    const leased = this.spendLease(bucket, limit, bucketId, now, tokens);
    if (leased) return { headers: leased };
    const cached = this.deny.get(key, limit, now);
    if (cached) {
      for (let i = 0; i < tokens; i++) this.events.decision(bucket, false, "deny_cache");
      return { denial: { bucket, limit, retryAfterMs: cached.until - now, fullInMs: cached.fullAt - now } };
    }

    const charge: Charge = { bucket, key, limit, bucketId, tokens, whole };
    const shard = String(shardOf(key));
    const batched = await this.batches.submit(shard, charge, defer);
    // A batch that never answered (its leader went away): ask the shard alone.
    const answer = batched === LOST ? ((await this.chargeBatch([charge], shard))[0] as Answer) : batched;
    if (answer.error) throw answer.error;
    if (answer.denial) return { denial: answer.denial };
    return { headers: answer.headers ?? {} };
  }

  /**
   * Gives back the token {@link check} took from the shard (a refundable bucket takes no lease) for
   * a request that turned out not to owe it (the right admin bearer): one call to `key`'s shard, not batched, meant to run off the response path. A
   * denial this isolate cached for the key is forgotten, since a token is back (the cache may only
   * deny what the bucket would). Never rejects: a refund that fails is logged and counted as a
   * limiter error, and leaves the token spent, which can only under-admit.
   */
  async refund(bucket: RefundableBucket, key: string, limit: Limit | null): Promise<void> {
    if (limit) await this.refundShard(bucket, key, limit, 1);
  }

  private async refundShard(bucket: BucketName, key: string, limit: Limit, tokens: number): Promise<void> {
    try {
      this.calls++;
      await this.backend.charge(shardOf(key), [{ key, limit, count: 0, refund: tokens }]);
      this.deny.forget(key);
    } catch (e) {
      this.failure(bucket, e, true);
    }
  }

  /**
   * Answers `charges` (keys of one shard, arrival order): each first from a lease of its key that
   * arrived while they waited, the rest with one call to the shard, one entry per key and limit.
   * Never rejects: a failure is an answer each.
   */
  private async chargeBatch(charges: Charge[], shard: string): Promise<Answer[]> {
    const sentAt = this.now();
    const answers: Answer[] = new Array(charges.length);
    // Per key and limit, one entry for its single requests; a whole charge is an entry of its own.
    const entries = new Map<string, Entry>();
    charges.forEach((c, i) => {
      const headers = this.spendLease(c.bucket, c.limit, c.bucketId, sentAt, c.tokens);
      if (headers) {
        answers[i] = { headers };
        return;
      }
      // What this isolate holds on lease is too little: it goes back to the bucket with this call,
      // ahead of the whole charge, so those tokens count toward it.
      if (c.whole) this.leases.retireAll(c.bucketId, sentAt);
      const id = c.whole ? `${i}#${c.bucketId}` : c.bucketId;
      const entry = entries.get(id);
      if (entry) entry.at.push(i);
      else entries.set(id, { first: c, at: [i], settle: [] });
    });
    if (entries.size === 0) return answers;
    const sent = [...entries.values()];
    // A key with several entries (whole charges) settles its leases with the first, so their unused
    // tokens count for every entry, and asks for a new lease with the last, after every entry is decided.
    const last = new Map(sent.map((e, j) => [e.first.bucketId, j]));
    const asked = new Set<string>();
    const request: KeyCharge[] = sent.map((e) => ({
      key: e.first.key,
      limit: e.first.limit,
      count: e.first.whole ? e.first.tokens : e.at.length,
      lease: { want: 0, settle: [] },
      ...(e.first.whole ? { whole: true } : {}),
    }));
    sent.forEach((e, j) => {
      const { bucket, bucketId } = e.first;
      if (asked.has(bucketId)) return;
      asked.add(bucketId);
      if (REFUNDABLE.has(bucket)) return;
      const { settle, ...ask } = this.leases.request(bucketId, sentAt, bucket === "publish");
      e.settle = settle;
      (request[j] as KeyCharge).lease = { want: 0, settle };
      const at = request[last.get(bucketId) as number] as KeyCharge;
      at.lease = { ...ask, settle: at.lease?.settle ?? [] };
    });
    // Other keys' leases of this shard that are done go back on the way: settling costs no call.
    const riders = this.leases.settlesFor(shard, asked, sentAt);
    for (const r of riders) {
      request.push({
        key: r.home.key,
        limit: r.home.limit,
        count: 0,
        lease: { want: 0, settle: r.settle },
        settleOnly: true,
      });
    }
    let results: (BatchChargeResult | { error: unknown })[];
    try {
      this.calls++;
      results = await this.backend.charge(Number(shard), request);
    } catch (e) {
      results = request.map(() => ({ error: e }));
    }
    riders.forEach((r, j) => {
      const result = results[sent.length + j];
      if (!result || "error" in result) this.leases.retry(r.id, r.settle, sentAt);
    });
    sent.forEach((e, j) => {
      const { bucket, key, limit, bucketId } = e.first;
      const result = results[j];
      if (!result || "error" in result) {
        this.leases.retry(bucketId, e.settle, sentAt);
        const cause = result ? result.error : "no answer for this key";
        e.at.forEach((i, k) => {
          answers[i] = { error: this.failure(bucket, cause, k === 0) };
        });
        return;
      }
      if (result.lease)
        this.leases.hold(bucketId, result.lease, sentAt, result.remaining, this.now() + result.fullInMs, {
          shard,
          key,
          limit,
        });
      const decided = e.first.whole
        ? [this.wholeAnswer(e.first, result)]
        : this.answers(bucket, key, limit, result, e.at.length);
      e.at.forEach((i, k) => {
        answers[i] = decided[k] as Answer;
      });
    });
    return answers;
  }

  /** Admits one request of `tokens` from the leases this isolate holds for `bucketId`, or returns null. */
  private spendLease(
    bucket: BucketName,
    limit: Limit,
    bucketId: string,
    now: number,
    tokens: number,
  ): Record<string, string> | null {
    const spent = this.leases.spend(bucketId, now, tokens);
    if (!spent) return null;
    for (let i = 0; i < tokens; i++) this.events.decision(bucket, true, "lease");
    return rateLimitHeaders(bucket, limit, spent.remaining, spent.fullAt - now);
  }

  /** A whole charge's answer: all its tokens granted, or denied (not cached: see {@link chargeAll}). */
  private wholeAnswer(c: Charge, result: BatchChargeResult): Answer {
    const allowed = result.granted >= c.tokens;
    for (let i = 0; i < c.tokens; i++) this.events.decision(c.bucket, allowed, "object");
    if (!allowed)
      return {
        denial: { bucket: c.bucket, limit: c.limit, retryAfterMs: result.retryAfterMs, fullInMs: result.fullInMs },
      };
    const remaining = result.remaining + (result.lease?.tokens ?? 0);
    return { headers: rateLimitHeaders(c.bucket, c.limit, remaining, result.fullInMs) };
  }

  private failure(bucket: BucketName, e: unknown, log: boolean): ApiError {
    if (log)
      console.error(`floodgate limiter: ${bucket} bucket failed, failing closed`, e instanceof Error ? e.message : e);
    this.events.error(bucket);
    return new ApiError("internal", "rate limiter unavailable");
  }

  /** The answers for a batch of `count` in arrival order; records a denial in the deny cache. */
  private answers(bucket: BucketName, key: string, limit: Limit, result: BatchChargeResult, count: number): Answer[] {
    const granted = Math.min(result.granted, count);
    if (granted < count) {
      const at = this.now();
      this.deny.set(key, { until: at + result.retryAfterMs, limit, fullAt: at + result.fullInMs });
    }
    return Array.from({ length: count }, (_, i) => {
      const allowed = i < granted;
      this.events.decision(bucket, allowed, "object");
      // Earlier requests in the batch saw the tokens later ones took.
      return allowed
        ? {
            headers: rateLimitHeaders(
              bucket,
              limit,
              result.remaining + (result.lease?.tokens ?? 0) + (granted - 1 - i),
              result.fullInMs,
            ),
          }
        : { denial: { bucket, limit, retryAfterMs: result.retryAfterMs, fullInMs: result.fullInMs } };
    });
  }
}
