/**
 * The record of dropped messages on the real local Queue and R2 bucket, in workerd: publishes that
 * drop go through DROPS_QUEUE to the Worker's own consumer, which writes gzip NDJSON objects by hour
 * to RECORD_BUCKET; redeliveries overwrite their own object; faults (the queue refusing, R2 failing,
 * the analytics channel down, a batch given up to the dead-letter queue) are retried and counted so
 * dropped = recorded + failed exactly; retention and the export read the bucket.
 *
 * The bucket is shared by the file's tests: each test's copies sit in an hour of their own, picked at
 * random from years no other test uses, and the flood test filters by its own source channel.
 */
import {
  createExecutionContext,
  createMessageBatch,
  createScheduledController,
  getQueueResult,
  waitOnExecutionContext,
} from "cloudflare:test";
import { describe, expect, it, vi } from "vitest";
import {
  batchId,
  HOUR_MS,
  hourPrefix,
  objectKey,
  type RecordBatch,
  type RecordCopy,
} from "../../../functions/record-batch";
import { ChannelObject } from "../../../src/channel/channel-object";
import worker from "../../../src/index";
import { EXPORT_MAX_OPEN_OBJECTS } from "../../../src/worker/record/export";
import { batchTag, gunzipText, writeObjects } from "../../../src/worker/record/record-objects";
import { DEAD_LETTER_QUEUE } from "../../../src/worker/record/record-queue";
import { sweepRecord } from "../../../src/worker/record/record-retention";
import { services } from "../../../src/worker/services";
import {
  adminHeaders,
  callAndWait,
  env,
  envWith,
  grown,
  mint,
  scrapeMetrics,
  setRate,
  uniq,
  until,
  withFailing,
} from "../../support/helpers";

const QUEUE = "floodgate-drops";

/** A random hour from 2030 on (tests of the flood use the present; retention uses 2001). */
function freshHour(): number {
  return Date.UTC(2030, 0, 1) + Math.floor(Math.random() * 80_000) * HOUR_MS;
}

function copiesAt(source: string, times: number[]): RecordCopy[] {
  return times.map((t, i) => ({
    id: crypto.randomUUID(),
    source_channel: source,
    // A number JSON.parse would round: the record keeps the publisher's digits.
    message: `{"i":${i},"big":12345678901234567890}`,
    publisher: "p",
    drop_rate: 1,
    dropped_at: t,
  }));
}

/** A batch as the producer makes it: its id starts with its earliest drop (functions/record-batch.ts). */
function batchOf(copies: RecordCopy[], analytics = `private:rec.${uniq()}.dropped`): RecordBatch {
  return { batch: batchId(copies, uniq("b")), analytics, copies };
}

/** Delivers queue messages to the Worker's consumer, as the queue does, and answers their ack state. */
async function deliver(queue: string, bodies: RecordBatch[], e: Env = env, attempts = 1) {
  const batch = createMessageBatch(
    queue,
    bodies.map((body) => ({ id: uniq("m"), timestamp: Date.now(), attempts, body })),
  );
  const ctx = createExecutionContext();
  await worker.queue?.(batch, e, ctx);
  const result = await getQueueResult(batch, ctx);
  await waitOnExecutionContext(ctx);
  return { result, ids: batch.messages.map((m) => m.id) };
}

async function metrics(e: Env = env) {
  const text = await (await callAndWait("/metrics", { headers: adminHeaders() }, e)).text();
  const v = (s: string) => Number(text.match(new RegExp(`^${s.replace(/[{}"]/g, "\\$&")} (\\d+)$`, "m"))?.[1] ?? 0);
  return {
    dropped: v('floodgate_messages_total{result="dropped"}'),
    recorded: v("floodgate_record_copies_total"),
    failed: v("floodgate_record_failures_total"),
    expired: v("floodgate_record_expired_total"),
    analyticsFailed: v("floodgate_analytics_copy_failures_total"),
    queueMessages: v("floodgate_record_queue_messages_total"),
    objectsWritten: v("floodgate_record_objects_written_total"),
  };
}

/** Counts since `before`, read through `e` (whose isolate buffer /metrics flushes first). */
async function delta(before: Awaited<ReturnType<typeof metrics>>, e: Env = env) {
  const now = await metrics(e);
  return {
    dropped: now.dropped - before.dropped,
    recorded: now.recorded - before.recorded,
    failed: now.failed - before.failed,
    expired: now.expired - before.expired,
    analyticsFailed: now.analyticsFailed - before.analyticsFailed,
    queueMessages: now.queueMessages - before.queueMessages,
    objectsWritten: now.objectsWritten - before.objectsWritten,
  };
}

/** Every object under an hour, with its lines parsed. */
async function objectsOf(hour: number): Promise<{ key: string; lines: RecordCopy[] }[]> {
  const out: { key: string; lines: RecordCopy[] }[] = [];
  const page = await env.RECORD_BUCKET.list({ prefix: hourPrefix(hour) });
  for (const o of page.objects) {
    const obj = await env.RECORD_BUCKET.get(o.key);
    if (!obj) continue;
    const text = await gunzipText(obj.body);
    out.push({
      key: o.key,
      lines: text
        .split("\n")
        .filter(Boolean)
        .map((l) => JSON.parse(l) as RecordCopy),
    });
  }
  return out;
}

async function exportLines(query: string): Promise<{ status: number; lines: string[] }> {
  const res = await callAndWait(`/v1/admin/analytics/export${query}`, { headers: adminHeaders() });
  const text = await res.text();
  return { status: res.status, lines: text.split("\n").filter(Boolean) };
}

/** The bucket, with `put` failing while `failing(key)` holds: the rest reach the real local R2. */
function failingPuts(failing: (key: string) => boolean): R2Bucket {
  const real = env.RECORD_BUCKET;
  return new Proxy(real, {
    get(target, prop) {
      if (prop === "put")
        return (key: string, ...rest: unknown[]) => {
          if (failing(key)) return Promise.reject(new Error("r2 unavailable"));
          return (target.put as (...a: unknown[]) => unknown).call(target, key, ...rest);
        };
      const v = Reflect.get(target, prop);
      return typeof v === "function" ? v.bind(target) : v;
    },
  });
}

describe("the path of a copy", () => {
  it("a flood of 30 KB drops past the old per-isolate byte cap is recorded whole, each copy once", async () => {
    const source = `public:recflood.${uniq()}`;
    const { access_token } = await mint({ sub: uniq("pub"), channels: ["public:recflood.*"], rl: "100000/s" });
    await setRate(source, 1);
    const before = await metrics();
    const t0 = Date.now();
    // 100 connections, 3 messages each: 300 copies of 30 KB, 9 MB (18 MiB counted in memory, past
    // the 16 MiB one isolate holds), all recorded.
    const body = JSON.stringify({ pad: "x".repeat(30_000) });
    const statuses = await Promise.all(
      Array.from({ length: 100 }, async () => {
        const out: number[] = [];
        for (let k = 0; k < 3; k++) {
          const res = await callAndWait(`/v1/publish/${source}`, {
            method: "POST",
            headers: { authorization: `Bearer ${access_token}`, "content-type": "application/json" },
            body,
          });
          out.push(res.status);
        }
        return out;
      }),
    );
    expect(statuses.flat().every((s) => s === 202)).toBe(true);
    await until(async () => (await delta(before)).recorded >= 300, "the consumer recording 300 copies", 30_000);
    const d = await delta(before);
    expect(d).toMatchObject({ dropped: 300, recorded: 300, failed: 0 });
    // Many copies to a queue message (at most 4 of 30 KB fit in one), and an object per consumer
    // invocation and hour: many messages to an object.
    expect(d.queueMessages).toBeGreaterThanOrEqual(75);
    expect(d.queueMessages).toBeLessThan(300);
    expect(d.objectsWritten).toBeGreaterThanOrEqual(1);
    expect(d.objectsWritten).toBeLessThan(d.queueMessages / 2);
    const { status, lines } = await exportLines(`?from=${t0}&to=${Date.now() + 1}&source_channel=${source}`);
    expect(status).toBe(200);
    expect(lines).toHaveLength(300);
    expect(new Set(lines.map((l) => (JSON.parse(l) as RecordCopy).id)).size).toBe(300);
  });

  it("the queue refusing a send counts every copy it refused as failed, logged by source channel", async () => {
    const source = `public:recrefuse.${uniq()}`;
    const { access_token } = await mint({ sub: uniq("pub"), channels: ["public:recrefuse.*"], rl: "100000/s" });
    await setRate(source, 1);
    const refusing = {
      send: () => Promise.reject(new Error("queue full")),
      sendBatch: () => Promise.reject(new Error("queue full")),
    } as unknown as Queue;
    const e = envWith({ DROPS_QUEUE: refusing });
    const before = await metrics();
    for (let i = 0; i < 5; i++)
      expect(
        (
          await callAndWait(
            `/v1/publish/${source}`,
            {
              method: "POST",
              headers: { authorization: `Bearer ${access_token}`, "content-type": "application/json" },
              body: JSON.stringify({ i }),
            },
            e,
          )
        ).status,
      ).toBe(202);
    const d = await delta(before, e);
    // None reached the analytics channel either: each is its failure too, counted once.
    expect(d).toMatchObject({ dropped: 5, recorded: 0, failed: 5, analyticsFailed: 5 });
    expect(d.dropped).toBe(d.recorded + d.failed);
    const src = (await (
      await callAndWait(`/v1/channels/${source}/stats`, { headers: adminHeaders() })
    ).json()) as Record<string, number>;
    expect(src).toMatchObject({ dropped_total: 5, analytics_copy_failures_total: 5 });
  });
});

describe("a copy too large for a queue message", () => {
  it("is counted as failed with its source channel and id, and the copies beside it are recorded", async () => {
    const source = `public:recbig.${uniq()}`;
    const { access_token } = await mint({ sub: uniq("pub"), channels: ["public:recbig.*"], rl: "100000/s" });
    await setRate(source, 1);
    // MAX_MESSAGE_BYTES past the queue's 128 KB, so a copy can be too large for any queue message.
    const e = envWith({ MAX_MESSAGE_BYTES: "200000" });
    const before = await metrics(e);
    const logged = vi.spyOn(console, "error");
    let lines: string[];
    try {
      const publish = (body: string) =>
        callAndWait(
          `/v1/publish/${source}`,
          {
            method: "POST",
            headers: { authorization: `Bearer ${access_token}`, "content-type": "application/json" },
            body,
          },
          e,
        );
      const [big, small] = await Promise.all([
        publish(JSON.stringify({ pad: "x".repeat(150_000) })),
        publish(JSON.stringify({ small: true })),
      ]);
      expect([big.status, small.status]).toEqual([202, 202]);
    } finally {
      lines = logged.mock.calls.map((args) => args.join(" "));
      logged.mockRestore();
    }
    await until(async () => {
      const d = await delta(before, e);
      return d.recorded + d.failed >= 2;
    }, "both copies settled");
    expect(await delta(before, e)).toMatchObject({ dropped: 2, recorded: 1, failed: 1, analyticsFailed: 1 });
    expect(lines.some((l) => l.includes("too large for a queue message") && l.includes(source))).toBe(true);
  });
});

describe("the record's objects", () => {
  it("a batch spanning an hour boundary is split into one gzip NDJSON object per UTC hour, in drop order", async () => {
    const h = freshHour();
    const source = `public:rechour.${uniq()}`;
    const copies = copiesAt(source, [h + HOUR_MS + 5, h + HOUR_MS - 1, h + HOUR_MS - 100, h + HOUR_MS]);
    const b = batchOf(copies);
    const { result } = await deliver(QUEUE, [b]);
    expect(result.explicitAcks).toHaveLength(1);
    const first = await objectsOf(h);
    const second = await objectsOf(h + HOUR_MS);
    const iso = new Date(h).toISOString();
    // Named by the hour and its earliest drop, then the consumer invocation that wrote it.
    expect(first.map((o) => o.key)).toEqual([
      expect.stringMatching(
        new RegExp(
          `^drops/dt=${iso.slice(0, 10)}/hour=${iso.slice(11, 13)}/${String(h + HOUR_MS - 100).padStart(13, "0")}-[\\w-]+\\.ndjson\\.gz$`,
        ),
      ),
    ]);
    // Its metadata names the queue message it holds (a redelivery finds it there) and counts its copies.
    const head = await env.RECORD_BUCKET.head(first[0]?.key ?? "");
    expect(head?.customMetadata).toEqual({ copies: "2", batches: await batchTag(b.batch) });
    expect(first[0]?.lines.map((c) => c.dropped_at)).toEqual([h + HOUR_MS - 100, h + HOUR_MS - 1]);
    expect(second[0]?.lines.map((c) => c.dropped_at)).toEqual([h + HOUR_MS, h + HOUR_MS + 5]);
    // One copy per line, the API's fields, the message as the publisher sent it.
    expect(Object.keys(first[0]?.lines[0] ?? {})).toEqual([
      "id",
      "source_channel",
      "message",
      "publisher",
      "drop_rate",
      "dropped_at",
    ]);
    const raw = await env.RECORD_BUCKET.get(first[0]?.key ?? "");
    expect(await gunzipText((raw as R2ObjectBody).body)).toContain('"big":12345678901234567890');
  });

  it("a batch delivered twice leaves each copy in the record once, counted once", async () => {
    const h = freshHour();
    const copies = copiesAt(`public:recdup.${uniq()}`, [h + 1, h + 2, h + 3]);
    const b = batchOf(copies);
    const before = await metrics();
    await deliver(QUEUE, [b]);
    await deliver(QUEUE, [b], env, 2); // the queue's at-least-once redelivery, under a new message id
    const objects = await objectsOf(h);
    expect(objects).toHaveLength(1);
    expect(objects[0]?.lines.map((c) => c.id)).toEqual(copies.map((c) => c.id));
    expect(await delta(before)).toMatchObject({ recorded: 3, failed: 0 });
    const { lines } = await exportLines(`?from=${h}&to=${h + HOUR_MS}`);
    expect(lines.map((l) => (JSON.parse(l) as RecordCopy).id)).toEqual(copies.map((c) => c.id));
  });
});

describe("faults", () => {
  it("R2 failing retries the message; after the queue's retries the dead letter counts the copies as failed", async () => {
    const h = freshHour();
    const copies = copiesAt(`public:recr2.${uniq()}`, [h + 10, h + 20]);
    const b = batchOf(copies);
    const e = envWith({ RECORD_BUCKET: failingPuts(() => true) });
    const before = await metrics();
    const { result, ids } = await deliver(QUEUE, [b], e);
    expect(result.retryMessages.map((m) => m.msgId)).toEqual(ids);
    expect(result.explicitAcks).toEqual([]);
    expect(await objectsOf(h)).toEqual([]);
    // The queue gives up after max_retries and moves the message to the dead-letter queue.
    const dead = await deliver(DEAD_LETTER_QUEUE, [b]);
    expect(dead.result.explicitAcks).toEqual(dead.ids);
    const d = await delta(before);
    expect(d).toMatchObject({ recorded: 0, failed: 2 });
    expect(d.recorded + d.failed).toBe(copies.length);
  });

  it("R2 failing for one hour of a split batch: the written hour counts recorded, the other failed, exactly", async () => {
    const h = freshHour();
    const copies = copiesAt(`public:recpart.${uniq()}`, [h + 1, h + 2, h + HOUR_MS + 1]);
    const b = batchOf(copies);
    const second = hourPrefix(h + HOUR_MS);
    const e = envWith({ RECORD_BUCKET: failingPuts((key) => key.startsWith(second)) });
    const before = await metrics();
    expect((await deliver(QUEUE, [b], e)).result.retryMessages).toHaveLength(1);
    await deliver(QUEUE, [b], e, 2); // retried, fails the same way: the first hour is not counted twice
    await deliver(DEAD_LETTER_QUEUE, [b]);
    const d = await delta(before);
    expect(d).toMatchObject({ recorded: 2, failed: 1 });
  });

  it("the analytics channel down: recorded and counted once, retried, and the dead letter counts no record failure", async () => {
    const h = freshHour();
    const copies = copiesAt(`public:recdown.${uniq()}`, [h + 1, h + 2]);
    const b = batchOf(copies);
    const before = await metrics();
    await withFailing(ChannelObject, "appendCopies", "analytics down", async () => {
      expect((await deliver(QUEUE, [b])).result.retryMessages).toHaveLength(1);
      expect((await deliver(QUEUE, [b], env, 2)).result.retryMessages).toHaveLength(1);
    });
    expect((await objectsOf(h))[0]?.lines).toHaveLength(2);
    await deliver(DEAD_LETTER_QUEUE, [b]);
    expect(await delta(before)).toMatchObject({ recorded: 2, failed: 0, analyticsFailed: 2 });
  });

  it("once the analytics channel answers again, the retried message reaches its history", async () => {
    const h = freshHour();
    const analytics = `private:rec.${uniq()}.dropped`;
    const copies = copiesAt(`public:recback.${uniq()}`, [h + 1, h + 2]);
    const b = batchOf(copies, analytics);
    await withFailing(ChannelObject, "appendCopies", "analytics down", () => deliver(QUEUE, [b]));
    const { result } = await deliver(QUEUE, [b], env, 2);
    expect(result.explicitAcks).toHaveLength(1);
    const stub = env.CHANNEL.get(env.CHANNEL.idFromName(analytics));
    const frames = (await stub.history(null, 10)).map((f) => JSON.parse(f) as { id: string });
    expect(frames.map((f) => f.id)).toEqual(copies.map((c) => c.id));
  });
});

describe("retention", () => {
  it("deletes only objects whose hour is past RECORD_RETENTION, oldest first, a bounded number of calls per run", async () => {
    const h = Date.UTC(2001, 0, 1) + Math.floor(Math.random() * 1000) * 24 * HOUR_MS;
    const source = `public:recret.${uniq()}`;
    for (const hour of [h, h + HOUR_MS, h + 2 * HOUR_MS, h + 3 * HOUR_MS])
      await deliver(QUEUE, [batchOf(copiesAt(source, [hour + 1, hour + 2]))]);
    const svc = services(env);
    // Now is such that the first three hours are wholly past the retention and the fourth is not.
    const now = h + 3 * HOUR_MS + svc.config.recordRetentionMs + 1;
    const before = await metrics();
    // One key a call, two calls a run.
    const run = () => sweepRecord(env, svc, now, { calls: 2, perCall: 1 });
    expect(await run()).toEqual({ deleted: 2, copies: 4, calls: 2 });
    expect(await objectsOf(h)).toEqual([]);
    expect(await objectsOf(h + HOUR_MS)).toEqual([]);
    expect(await objectsOf(h + 2 * HOUR_MS)).toHaveLength(1);
    expect(await run()).toEqual({ deleted: 1, copies: 2, calls: 1 });
    expect(await run()).toEqual({ deleted: 0, copies: 0, calls: 0 });
    expect(await objectsOf(h + 3 * HOUR_MS)).toHaveLength(1);
    expect((await delta(before)).expired).toBe(6);
  });

  it("deletes in as many calls as it takes: more than one call's keys go in one run", async () => {
    const h = Date.UTC(2003, 0, 1) + Math.floor(Math.random() * 1000) * 24 * HOUR_MS;
    const source = `public:recret.${uniq()}`;
    // Five objects of one expired hour (one consumer invocation each).
    for (let i = 0; i < 5; i++) await deliver(QUEUE, [batchOf(copiesAt(source, [h + 10 + i]))]);
    expect(await objectsOf(h)).toHaveLength(5);
    const svc = services(env);
    const now = h + HOUR_MS + svc.config.recordRetentionMs + 1;
    // Two keys a call: one run deletes all five (and any older object another test left) in three calls or more.
    const swept = await sweepRecord(env, svc, now, { calls: 10, perCall: 2 });
    expect(swept.deleted).toBeGreaterThanOrEqual(5);
    expect(swept.calls).toBe(Math.ceil(swept.deleted / 2));
    expect(await objectsOf(h)).toEqual([]);
  });
});

describe("the Cron sweep", () => {
  it("runs the record's retention beside the sampler", async () => {
    const h = Date.UTC(2002, 0, 1) + Math.floor(Math.random() * 1000) * HOUR_MS;
    await deliver(QUEUE, [batchOf(copiesAt(`public:reccron.${uniq()}`, [h + 1]))]);
    expect(await objectsOf(h)).toHaveLength(1);
    const ctx = createExecutionContext();
    await worker.scheduled?.(createScheduledController({ scheduledTime: Date.now(), cron: "* * * * *" }), env, ctx);
    await waitOnExecutionContext(ctx);
    expect(await objectsOf(h)).toEqual([]);
  });
});

describe("export from the record", () => {
  it("every copy of [from, to) over many objects, once, hours in order and drop order within each hour", async () => {
    const h = freshHour();
    const s1 = `public:recexp.${uniq()}`;
    const s2 = `public:recexp.${uniq()}`;
    const all: RecordCopy[] = [];
    // 30 batches, each with copies scattered over three hours, out of drop-time order.
    for (let b = 0; b < 30; b++) {
      const times = Array.from({ length: 10 }, () => h + Math.floor(Math.random() * 3 * HOUR_MS));
      const copies = [...copiesAt(s1, times.slice(0, 5)), ...copiesAt(s2, times.slice(5))];
      all.push(...copies);
      await deliver(QUEUE, [batchOf(copies)]);
    }
    const from = h + 1000;
    const to = h + 2 * HOUR_MS + 1000;
    const inWindow = all.filter((c) => c.dropped_at >= from && c.dropped_at < to);
    const { status, lines } = await exportLines(`?from=${from}&to=${to}`);
    expect(status).toBe(200);
    const got = lines.map((l) => JSON.parse(l) as RecordCopy);
    expect(got.map((c) => c.id).sort()).toEqual(inWindow.map((c) => c.id).sort());
    const times = got.map((c) => c.dropped_at);
    expect(times).toEqual([...times].sort((a, b) => a - b));
    const one = await exportLines(`?from=${from}&to=${to}&source_channel=${s2}`);
    expect(one.lines.map((l) => (JSON.parse(l) as RecordCopy).id).sort()).toEqual(
      inWindow
        .filter((c) => c.source_channel === s2)
        .map((c) => c.id)
        .sort(),
    );
  });

  it("an hour whose objects overlap past EXPORT_MAX_OPEN_OBJECTS answers 503, counted as export_too_dense", async () => {
    const h = freshHour();
    const source = `public:recexp.${uniq()}`;
    // One object per isolate batch, every one of them holding a copy dropped at the same moment.
    const objects = Array.from({ length: EXPORT_MAX_OPEN_OBJECTS + 1 }, () => {
      const copies = copiesAt(source, [h + 1000]);
      const batch = batchId(copies, uniq("b"));
      return { key: objectKey(h, batch), copies, batches: [batch] };
    });
    expect((await writeObjects(env.RECORD_BUCKET, objects, () => {})).size).toBe(objects.length);
    const before = await scrapeMetrics();
    const res = await callAndWait(`/v1/admin/analytics/export?from=${h}&to=${h + HOUR_MS}`, {
      headers: adminHeaders(),
    });
    expect(res.status).toBe(503);
    expect(res.headers.get("floodgate-refusal")).toBe("export_too_dense");
    expect(await res.json()).toMatchObject({ code: "unavailable", meta: { code: "UNAVAILABLE" } });
    const refused = grown(before, await scrapeMetrics());
    expect(refused['floodgate_refusals_total{reason="export_too_dense"}']).toBe(1);
    expect(refused['floodgate_refusals_total{reason="unavailable"}']).toBeUndefined();
  });

  it("answers 400 to a missing bound, to ≤ from, and a range longer than RECORD_RETENTION", async () => {
    const retention = services(env).config.recordRetentionMs;
    for (const q of ["?from=1", "?to=5", "?from=5&to=5", "?from=6&to=5", `?from=0&to=${retention + 1}`]) {
      const res = await callAndWait(`/v1/admin/analytics/export${q}`, { headers: adminHeaders() });
      expect(res.status, q).toBe(400);
      expect(((await res.json()) as { code: string }).code).toBe("invalid_argument");
    }
    expect((await exportLines(`?from=0&to=${retention}`)).status).toBe(200);
  });
});

describe("configuration", () => {
  it("the manifest shows RECORD_RETENTION and ANALYTICS_RETENTION, defaults 30d and 1d, and a bad one fails closed", async () => {
    const m = (await (await callAndWait("/v1/manifest")).json()) as { record: unknown };
    expect(m.record).toEqual({ retention: "720h", analytics_retention: "24h" });
    const custom = (await (await callAndWait("/v1/manifest", {}, envWith({ RECORD_RETENTION: "90m" }))).json()) as {
      record: unknown;
    };
    expect(custom.record).toEqual({ retention: "1h30m", analytics_retention: "24h" });
    const bad = await callAndWait("/v1/manifest", {}, envWith({ RECORD_RETENTION: "soon" }));
    expect(bad.status).toBe(500);
    expect(await bad.json()).toMatchObject({ meta: { variable: "RECORD_RETENTION" } });
  });
});

describe("reconciliation", () => {
  it("the analytics channel's stats show the record's counts, read from the metrics", async () => {
    const res = await callAndWait(`/v1/channels/private:floodgate.analytics.dropped/stats`, {
      headers: adminHeaders(),
    });
    expect(res.status).toBe(200);
    const { record } = (await res.json()) as { record: Record<string, unknown> };
    const m = await metrics();
    expect(record).toMatchObject({
      retention: "720h",
      analytics_retention: "24h",
      copies_total: m.recorded,
      copy_failures_total: m.failed,
      copies_expired_total: m.expired,
    });
  });
});
