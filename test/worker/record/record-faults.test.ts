/**
 * The record survives storage faults (docs/operations.md, "The record of dropped messages"): an
 * outage of R2 or of the analytics channel's object, of up to 60 s, is ridden out by the queue's
 * retries, which back off; what still cannot be recorded is counted as a failure; the analytics
 * channel holds each copy once whatever the redeliveries; one object is written per consumer batch.
 *
 * The queue is played by {@link QueueRun}: it delivers messages to the Worker's real consumers
 * (`worker.queue`) in batches, as the local queue does, honours each retry's delay on a clock of its
 * own, moves a message past `max_retries` to the dead-letter queue and settles when nothing is left.
 * Faults are windows on that clock: the R2 binding fails every call while one is open, and the
 * analytics object's `appendCopies` throws. Each test's copies sit in an hour of their own (2040 on).
 */
import { createExecutionContext, createMessageBatch, getQueueResult, waitOnExecutionContext } from "cloudflare:test";
import { describe, expect, it } from "vitest";
import { batchId, HOUR_MS, hourPrefix, type RecordBatch, type RecordCopy } from "../../../functions/record-batch";
import { ChannelObject } from "../../../src/channel/channel-object";
import worker from "../../../src/index";
import { gunzipText } from "../../../src/worker/record/record-objects";
import { DEAD_LETTER_ATTEMPTS, DEAD_LETTER_QUEUE } from "../../../src/worker/record/record-queue";
import wranglerToml from "../../../wrangler.toml?raw";
import { env, envWith, grown, scrapeMetrics, uniq, withFailing } from "../../support/helpers";

const QUEUE = "floodgate-drops";

function freshHour(): number {
  return Date.UTC(2040, 0, 1) + Math.floor(Math.random() * 80_000) * HOUR_MS;
}

function copies(source: string, hour: number, n: number): RecordCopy[] {
  return Array.from({ length: n }, (_, i) => ({
    id: crypto.randomUUID(),
    source_channel: source,
    message: `{"i":${i}}`,
    publisher: "p",
    drop_rate: 1,
    dropped_at: hour + 1 + i,
  }));
}

/** Queue messages as the producer makes them: `perMessage` copies each. */
function batches(all: RecordCopy[], analytics: string, perMessage: number): RecordBatch[] {
  const out: RecordBatch[] = [];
  for (let k = 0; k < all.length; k += perMessage) {
    const part = all.slice(k, k + perMessage);
    out.push({ batch: batchId(part, uniq("b")), analytics, copies: part });
  }
  return out;
}

/** A window of the run's clock (seconds) in which a fault is on. */
type Window = [from: number, until: number];
const within = (t: number, w: Window | null) => w !== null && t >= w[0] && t < w[1];

/** The R2 binding, failing every call while `down()` holds; the real local bucket otherwise. */
function flakyBucket(down: () => boolean): R2Bucket {
  const real = env.RECORD_BUCKET;
  return new Proxy(real, {
    get(target, prop) {
      const v = Reflect.get(target, prop);
      if (typeof v !== "function") return v;
      return (...args: unknown[]) => {
        if (down()) return Promise.reject(new Error("r2 unavailable (injected)"));
        return (v as (...a: unknown[]) => unknown).apply(target, args);
      };
    },
  });
}

interface Pending {
  queue: string;
  body: RecordBatch;
  attempts: number;
  /** When it is due, on the run's clock (s). */
  at: number;
}

/**
 * The queue, played on a clock of its own: batches of up to `maxBatch` due messages go to the
 * Worker's consumer; a retry comes back after the delay it asked for (wrangler.toml's `retry_delay`
 * when it asked for none); past `max_retries` a message goes to the dead-letter queue.
 */
class QueueRun {
  now = 0;
  private pending: Pending[] = [];
  readonly retryDelays: number[] = [];
  deadLetters = 0;

  constructor(
    private readonly e: Env,
    private readonly config: Record<string, { maxRetries: number; retryDelay: number; deadLetter?: string }>,
  ) {}

  send(bodies: RecordBatch[], queue = QUEUE): void {
    for (const body of bodies) this.pending.push({ queue, body, attempts: 1, at: this.now });
  }

  async settle(maxBatch = 100): Promise<void> {
    for (let turns = 0; this.pending.length > 0; turns++) {
      if (turns > 10_000) throw new Error("the queue never settled");
      this.now = Math.min(...this.pending.map((p) => p.at));
      const due = this.pending.filter((p) => p.at <= this.now);
      const queue = (due[0] as Pending).queue;
      const batch = due.filter((p) => p.queue === queue).slice(0, maxBatch);
      this.pending = this.pending.filter((p) => !batch.includes(p));
      const messages = batch.map((p) => ({ id: uniq("m"), timestamp: Date.now(), attempts: p.attempts, body: p.body }));
      const mb = createMessageBatch(queue, messages);
      // The delay each retry asks for (the test helper's result names the message, not its delay).
      const asked = new Map<string, number | undefined>();
      for (const m of mb.messages) {
        const retry = m.retry.bind(m);
        Object.defineProperty(m, "retry", {
          value: (o?: QueueRetryOptions) => {
            asked.set(m.id, o?.delaySeconds);
            retry(o);
          },
        });
      }
      const ctx = createExecutionContext();
      let result: Awaited<ReturnType<typeof getQueueResult>>;
      try {
        await worker.queue?.(mb, this.e, ctx);
        result = await getQueueResult(mb, ctx);
      } finally {
        await waitOnExecutionContext(ctx);
      }
      const config = this.config[queue] as { maxRetries: number; retryDelay: number; deadLetter?: string };
      const retried = new Map(result.retryMessages.map((r) => [r.msgId, asked.get(r.msgId)]));
      batch.forEach((p, i) => {
        const id = (messages[i] as { id: string }).id;
        if (!result.retryBatch.retry && !retried.has(id)) return; // acknowledged (explicitly or not)
        const delay = retried.get(id) ?? result.retryBatch.delaySeconds ?? config.retryDelay;
        this.retryDelays.push(delay);
        if (p.attempts > config.maxRetries) {
          if (config.deadLetter) {
            this.deadLetters++;
            this.pending.push({ queue: config.deadLetter, body: p.body, attempts: 1, at: this.now });
          }
          return; // without a dead-letter queue the platform deletes it: what the consumer must never let happen
        }
        this.pending.push({ ...p, attempts: p.attempts + 1, at: this.now + delay });
      });
    }
  }
}

/** The consumers as wrangler.toml declares them. */
function queueConfig(): Record<string, { maxRetries: number; retryDelay: number; deadLetter?: string }> {
  const out: Record<string, { maxRetries: number; retryDelay: number; deadLetter?: string }> = {};
  for (const block of wranglerToml.split("[[queues.consumers]]").slice(1)) {
    const field = (name: string) => /^(\w+)\s*=\s*"?([^"\n]+)"?/m.exec(block.slice(block.indexOf(`\n${name}`)))?.[2];
    const queue = field("queue") as string;
    out[queue] = {
      maxRetries: Number(field("max_retries")),
      retryDelay: Number(field("retry_delay") ?? 0),
      deadLetter: field("dead_letter_queue"),
    };
  }
  return out;
}

/** Every copy in the record under an hour, by id (an id twice means a copy recorded twice). */
async function recordIds(hour: number): Promise<{ ids: string[]; objects: number }> {
  const ids: string[] = [];
  const page = await env.RECORD_BUCKET.list({ prefix: hourPrefix(hour) });
  for (const o of page.objects) {
    const obj = await env.RECORD_BUCKET.get(o.key);
    if (!obj) continue;
    for (const line of (await gunzipText(obj.body)).split("\n").filter(Boolean))
      ids.push((JSON.parse(line) as RecordCopy).id);
  }
  return { ids, objects: page.objects.length };
}

/** Every copy on an analytics channel, by id. */
async function analyticsIds(analytics: string): Promise<string[]> {
  const stub = env.CHANNEL.get(env.CHANNEL.idFromName(analytics));
  return (await stub.history(0, 100_000)).map((f) => (JSON.parse(f) as { id: string }).id);
}

const dupes = (ids: string[]) => ids.length - new Set(ids).size;

const RECORDED = "floodgate_record_copies_total";
const FAILED = "floodgate_record_failures_total";
const ANALYTICS_FAILED = "floodgate_analytics_copy_failures_total";

/** Runs `copies` through the queue with R2 and the analytics object down in the windows given. */
async function run(opts: { n: number; perMessage: number; r2?: Window; analytics?: Window; always?: "r2" }) {
  const hour = freshHour();
  const analytics = `private:rec.${uniq()}.dropped`;
  const all = copies(`public:recfault.${uniq()}`, hour, opts.n);
  let q: QueueRun | null = null;
  const clock = () => q?.now ?? 0;
  const e = envWith({ RECORD_BUCKET: flakyBucket(() => opts.always === "r2" || within(clock(), opts.r2 ?? null)) });
  q = new QueueRun(e, queueConfig());
  const before = await scrapeMetrics();
  q.send(batches(all, analytics, opts.perMessage));
  const queue = q;
  await withFailing(
    ChannelObject,
    "appendCopies",
    "analytics object down (injected)",
    () => queue.settle(),
    () => within(clock(), opts.analytics ?? null),
  );
  const d = grown(before, await scrapeMetrics());
  return {
    copies: all,
    recorded: d[RECORDED] ?? 0,
    failed: d[FAILED] ?? 0,
    analyticsFailed: d[ANALYTICS_FAILED] ?? 0,
    record: await recordIds(hour),
    analytics: await analyticsIds(analytics),
    queue,
  };
}

describe("the record survives storage faults", () => {
  it("retries back off: each delay longer than the last, together past a 60 s outage", async () => {
    const r = await run({ n: 4, perMessage: 4, always: "r2" });
    const main = r.queue.retryDelays.slice(0, queueConfig()[QUEUE]?.maxRetries);
    for (let i = 1; i < main.length; i++) expect(main[i]).toBeGreaterThan(main[i - 1] as number);
    expect(main.slice(0, -1).reduce((a, b) => a + b, 0)).toBeGreaterThan(60);
    // R2 never came back: every copy is a counted failure, none lost uncounted.
    expect(r).toMatchObject({ recorded: 0, failed: 4 });
  });

  it("a 60 s outage of R2: every copy reaches the record and the analytics channel once", async () => {
    const r = await run({ n: 300, perMessage: 10, r2: [0, 60] });
    expect(r.recorded + r.failed).toBe(300);
    expect(r.failed).toBe(0);
    expect(r.record.ids.sort()).toEqual(r.copies.map((c) => c.id).sort());
    expect(r.analytics.sort()).toEqual(r.copies.map((c) => c.id).sort());
  });

  it("a 60 s outage of the analytics object: recorded once, and on the analytics channel once whatever the redeliveries", async () => {
    const r = await run({ n: 300, perMessage: 10, analytics: [0, 60] });
    expect(r).toMatchObject({ recorded: 300, failed: 0 });
    expect(dupes(r.record.ids)).toBe(0);
    expect(r.record.ids).toHaveLength(300);
    expect(dupes(r.analytics)).toBe(0);
    expect(r.analytics).toHaveLength(300);
  });

  it("outages of both, one after the other, then an outage too long to ride out: dropped = recorded + failed, no copy twice", async () => {
    const both = await run({ n: 200, perMessage: 7, r2: [0, 40], analytics: [30, 90] });
    expect(both).toMatchObject({ recorded: 200, failed: 0 });
    expect(dupes(both.record.ids)).toBe(0);
    expect(both.analytics.sort()).toEqual(both.copies.map((c) => c.id).sort());
    const long = await run({ n: 50, perMessage: 5, r2: [0, 3600] });
    expect(long.queue.deadLetters).toBeGreaterThan(0);
    expect(long.recorded + long.failed).toBe(50);
    expect(long.failed).toBeGreaterThan(0);
    expect(dupes(long.record.ids)).toBe(0);
    expect(long.record.ids).toHaveLength(long.recorded);
    // The live view: every copy is on the analytics channel or counted as its failure, once.
    expect(long.analytics.length + long.analyticsFailed).toBe(50);
    expect(dupes(long.analytics)).toBe(0);
  });

  it("the dead-letter consumer never lets a letter go uncounted, even when it cannot check the record", async () => {
    const q = queueConfig();
    expect(q[DEAD_LETTER_QUEUE]?.maxRetries).toBe(DEAD_LETTER_ATTEMPTS - 1);
    const r = await run({ n: 20, perMessage: 5, always: "r2" });
    expect(r.queue.deadLetters).toBe(4);
    expect(r).toMatchObject({ recorded: 0, failed: 20, analyticsFailed: 20 });
  });

  it("writes one object per consumer batch and hour, not one per queue message", async () => {
    const before = await scrapeMetrics();
    const r = await run({ n: 100, perMessage: 5 });
    expect(r.record.objects).toBe(1);
    expect(r.record.ids).toHaveLength(100);
    expect(grown(before, await scrapeMetrics()).floodgate_record_objects_written_total).toBe(1);
  });
});
