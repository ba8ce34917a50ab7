/**
 * The analytics channel, the record of dropped messages end to end in workerd: it keeps copies for
 * ANALYTICS_RETENTION (expired by its alarm, run with runDurableObjectAlarm after moving stored times
 * back), pages through every copy, filters by source channel, takes no publish from anyone but
 * Floodgate, checks the export's parameters, and a flood past the isolate's byte cap (the drops queue
 * stalled) counts every copy it turns away, so dropped = recorded + failed exactly. The record in
 * RECORD_BUCKET is tested in test/worker/record/record-bucket.test.ts.
 *
 * Each test uses an analytics channel of its own (ANALYTICS_CHANNEL in a custom env), so no test sees
 * another's copies.
 */
import {
  createExecutionContext,
  evictDurableObject,
  runDurableObjectAlarm,
  runInDurableObject,
  waitOnExecutionContext,
} from "cloudflare:test";
import { describe, expect, it } from "vitest";
import { pollUntil } from "../../../functions/waiting";
import type { CopyItem } from "../../../src/channel/calls";
import type { ChannelObject } from "../../../src/channel/channel-object";
import worker from "../../../src/index";
import { PAGE_MAX_BYTES } from "../../../src/relay/bounds";
import {
  adminHeaders,
  BASE,
  call,
  callAndWait,
  env,
  envWith,
  type Frame,
  historyOf,
  mint,
  openSocket,
  publishTo,
  setRate,
  uniq,
  until,
} from "../../support/helpers";
import { clientEventConfigured } from "../../support/host-internals";
import { authFor, openPusher, APP as PUSHER_APP, signedApiCall } from "../../support/pusher";

const DAY = 86_400_000;

/** A fresh analytics channel, the env that uses it, and a token that may read it. */
async function record() {
  const name = `private:rec.${uniq()}.dropped`;
  const e = envWith({ ANALYTICS_CHANNEL: name });
  const { access_token } = await mint({ sub: uniq("analyst"), channels: [name], scopes: ["subscribe"] });
  const stub = env.CHANNEL.get(env.CHANNEL.idFromName(name));
  return { name, env: e, token: access_token, stub };
}

const copyOf = (i: number, source: string, droppedAt: number): CopyItem => ({
  id: crypto.randomUUID(),
  data: JSON.stringify({ source_channel: source, message: { i }, publisher: "p", drop_rate: 1, dropped_at: droppedAt }),
  publisher: "p",
  source_channel: source,
  dropped_at: droppedAt,
});

/** Appends copies straight to the record's object, 100 per call (as the Worker's batches do). */
async function append(stub: DurableObjectStub<ChannelObject>, name: string, items: CopyItem[]): Promise<void> {
  for (let k = 0; k < items.length; k += 100) await stub.appendCopies(name, items.slice(k, k + 100), Date.now());
}

interface CopyFrame extends Frame {
  data: { source_channel: string; message: { i: number }; dropped_at: number };
}

async function page(r: Awaited<ReturnType<typeof record>>, query: string): Promise<CopyFrame[]> {
  const res = await callAndWait(
    `/v1/history/${r.name}${query}`,
    { headers: { authorization: `Bearer ${r.token}` } },
    r.env,
  );
  expect(res.status).toBe(200);
  return ((await res.json()) as { messages: CopyFrame[] }).messages;
}

/** Pages with `after=<last seq>&limit=1000` until an empty page, as the docs tell an analyst to. */
async function pageAll(
  r: Awaited<ReturnType<typeof record>>,
  extra = "",
): Promise<{ frames: CopyFrame[]; pages: number }> {
  const frames: CopyFrame[] = [];
  let pages = 0;
  for (let after = 0; ; pages++) {
    const p = await page(r, `?after=${after}&limit=1000${extra}`);
    if (p.length === 0) return { frames, pages };
    frames.push(...p);
    after = p[p.length - 1]?.seq as number;
  }
}

async function recordStats(r: Awaited<ReturnType<typeof record>>) {
  const res = await callAndWait(`/v1/channels/${r.name}/stats`, { headers: adminHeaders() }, r.env);
  expect(res.status).toBe(200);
  return ((await res.json()) as { record: Record<string, unknown> }).record;
}

const ANALYTICS = "private:floodgate.analytics.dropped";

describe("retention", () => {
  it("the alarm expires copies older than ANALYTICS_RETENTION in batches and keeps the newer ones", async () => {
    const r = await record();
    const now = Date.now();
    await append(
      r.stub,
      r.name,
      Array.from({ length: 2600 }, (_, i) => copyOf(i, "public:src.a", now)),
    );
    // The first 2,500 copies were dropped 2 days ago (past the 1d default), the last 100 now.
    await runInDurableObject(r.stub, (_o, state) => {
      state.storage.sql.exec("UPDATE messages SET dropped_at = dropped_at - ? WHERE seq <= 2500", 2 * DAY);
    });
    // Never on the publish path: appending more expires nothing. The append sets the alarm for the
    // oldest copy's expiry, now past, so the runtime would run it whenever it gets to it; it is moved
    // on in the same call, so it runs when this test says (runDurableObjectAlarm), not in a race.
    const counts = await runInDurableObject(r.stub, async (instance, state) => {
      instance.appendCopies(r.name, [copyOf(2600, "public:src.a", now)], Date.now());
      const c = instance.recordCounts();
      await state.storage.setAlarm(Date.now() + 3_600_000);
      return c;
    });
    expect(counts).toMatchObject({ copies_total: 2601, copies_kept: 2601, copies_expired_total: 0 });

    expect(await runDurableObjectAlarm(r.stub)).toBe(true);
    const { frames } = await pageAll(r);
    expect(frames.map((f) => f.data.message.i)).toEqual(Array.from({ length: 101 }, (_, i) => 2500 + i));
    expect(await r.stub.recordCounts()).toMatchObject({
      copies_total: 2601,
      copies_kept: 101,
      copies_expired_total: 2500,
      oldest_dropped_at: now,
    });
    // The stats show what the channel keeps beside the record's own counts (test/worker/record/record-bucket.test.ts).
    expect(await recordStats(r)).toMatchObject({
      analytics_retention: "24h", // ANALYTICS_RETENTION's default 1d, in canonical form
      copies_kept: 101,
      oldest_dropped_at: now,
    });
    // The next alarm is when the oldest copy kept expires.
    const next = await runInDurableObject(r.stub, (_o, state) => state.storage.getAlarm());
    expect(next).toBe(now + DAY);
    // The expired copies show in /metrics, read from the object.
    const metrics = await (await callAndWait("/metrics", { headers: adminHeaders() }, r.env)).text();
    expect(metrics).toMatch(/^floodgate_analytics_expired_total 2500$/m);
  });

  it("an alarm set earlier by another job is never pushed later", async () => {
    const r = await record();
    const soon = Date.now() + 60_000;
    await runInDurableObject(r.stub, (_o, state) => state.storage.setAlarm(soon));
    // A fresh instance: the object reads its alarm when it starts, as it does after any restart.
    await evictDurableObject(r.stub);
    await append(r.stub, r.name, [copyOf(0, "public:src.a", Date.now())]);
    expect(await runInDurableObject(r.stub, (_o, state) => state.storage.getAlarm())).toBe(soon);
  });
});

describe("each copy once", () => {
  it("a batch delivered again appends only the copies not kept yet, and a copy twice in one batch once", async () => {
    const r = await record();
    const now = Date.now();
    const items = Array.from({ length: 250 }, (_, i) => copyOf(i, "public:src.again", now + i));
    await append(r.stub, r.name, items.slice(0, 150));
    // 100 new copies, then 60 kept already (past the first query's 100 ids), then one new one again.
    const again = [...items.slice(150, 250), ...items.slice(90, 150), items[200] as CopyItem];
    expect(await r.stub.appendCopies(r.name, again, now)).toBe(100);
    const { frames } = await pageAll(r);
    expect(frames.map((f) => f.data.message.i)).toEqual([
      ...Array.from({ length: 150 }, (_, i) => i),
      ...Array.from({ length: 100 }, (_, i) => 150 + i),
    ]);
  });
});

describe("paging and filtering", () => {
  it("after=<seq>&limit=1000 returns every copy exactly once, in order, across page boundaries", async () => {
    const r = await record();
    const now = Date.now();
    await append(
      r.stub,
      r.name,
      Array.from({ length: 2345 }, (_, i) => copyOf(i, `public:src.s${i % 3}`, now + i)),
    );
    const { frames, pages } = await pageAll(r);
    expect(pages).toBe(3); // 1000 + 1000 + 345, then an empty page
    expect(frames.map((f) => f.seq)).toEqual(Array.from({ length: 2345 }, (_, i) => i + 1));
    expect(frames.map((f) => f.data.message.i)).toEqual(Array.from({ length: 2345 }, (_, i) => i));
    expect(frames.every((f) => f.channel === r.name)).toBe(true);
  });

  it("source_channel returns only that channel's copies, paged the same way", async () => {
    const r = await record();
    const now = Date.now();
    await append(
      r.stub,
      r.name,
      Array.from({ length: 1500 }, (_, i) => copyOf(i, `public:src.s${i % 3}`, now)),
    );
    const { frames } = await pageAll(r, "&source_channel=public:src.s1");
    expect(frames.map((f) => f.data.message.i)).toEqual(Array.from({ length: 500 }, (_, i) => 3 * i + 1));
    expect(frames.every((f) => f.data.source_channel === "public:src.s1")).toBe(true);
    // Without after: the newest `limit` copies of that source, oldest first.
    const newest = await page(r, "?limit=3&source_channel=public:src.s2");
    expect(newest.map((f) => f.data.message.i)).toEqual([1493, 1496, 1499]);
    expect(await page(r, "?source_channel=public:src.none")).toEqual([]);
  });

  it("refuses a bad source_channel, and source_channel on any channel but the analytics channel", async () => {
    const r = await record();
    const get = (path: string, token = r.token) =>
      callAndWait(path, { headers: { authorization: `Bearer ${token}` } }, r.env);
    for (const bad of ["nope", "public:A.b", "", "public:x"]) {
      const res = await get(`/v1/history/${r.name}?source_channel=${encodeURIComponent(bad)}`);
      expect(res.status).toBe(400);
      expect(await res.json()).toMatchObject({ code: "invalid_argument", meta: { code: "INVALID_ARGUMENT" } });
    }
    const res = await get("/v1/history/public:src.s1?source_channel=public:src.s1");
    expect(res.status).toBe(400);
    expect(((await res.json()) as { msg: string }).msg).toContain("only to the analytics channel");
  });

  it("a page of large copies stops early by bytes, and paging still returns every copy once", async () => {
    const r = await record();
    const pad = "x".repeat(30_000);
    const big = (i: number): CopyItem => ({
      ...copyOf(i, "public:src.big", Date.now()),
      data: JSON.stringify({ i, pad }),
    });
    await append(
      r.stub,
      r.name,
      Array.from({ length: 300 }, (_, i) => big(i)),
    );
    const first = await page(r, "?after=0&limit=1000");
    expect(first.length).toBeLessThan(300);
    expect(first.length).toBeGreaterThanOrEqual(Math.floor(PAGE_MAX_BYTES / 30_100));
    const { frames } = await pageAll(r);
    expect(frames.map((f) => f.seq)).toEqual(Array.from({ length: 300 }, (_, i) => i + 1));
  });
});

describe("the record is written by Floodgate alone", () => {
  it("a publish to ANALYTICS_CHANNEL answers 403 whatever the token, and adds nothing", async () => {
    const writer = (await mint({ sub: uniq("ops"), channels: ["private:floodgate.analytics.dropped"] })).access_token;
    const other = (await mint({ sub: uniq("u"), channels: ["public:a.b"] })).access_token;
    const marker = uniq("forged");
    for (const token of [writer, other, "garbage"]) {
      const res = await publishTo(ANALYTICS, token, { source_channel: "public:a.b", marker });
      expect(res.status).toBe(403);
      expect(await res.json()).toMatchObject({ code: "permission_denied", meta: { code: "PERMISSION_DENIED" } });
    }
    const anonymous = await call(`/v1/publish/${ANALYTICS}`, { method: "POST", body: "1" });
    expect(anonymous.status).toBe(403);
    const history = await call(`/v1/history/${ANALYTICS}?limit=1000`, {
      headers: { authorization: `Bearer ${writer}` },
    });
    expect(history.status).toBe(200);
    expect(await history.text()).not.toContain(marker);
  });
});

describe("a Pusher-named analytics channel is written by Floodgate alone", () => {
  it("an HTTP API event naming it answers 403 and publishes nothing; a client event on it is pusher:error 4300", async () => {
    const name = `private-${uniq("rec")}.dropped`;
    const beside = `private-${uniq("ok")}.x`;
    const e = envWith({ ANALYTICS_CHANNEL: `pusher:${name}` });
    const res = await signedApiCall(
      "POST",
      `/apps/${PUSHER_APP.id}/events`,
      {},
      { name: "forged", data: "x", channels: [beside, name] },
      { env: e },
    );
    expect(res.status).toBe(403);
    expect(await res.text()).toContain("analytics channel");
    const reader = (await mint({ sub: uniq("r"), channels: [`pusher:${name}`, `pusher:${beside}`] })).access_token;
    for (const ch of [name, beside]) expect(await historyOf(`pusher:${ch}`, reader)).toEqual([]);
    // A connection subscribed to it (its literal name granted), whose host reads that configuration.
    const p = await openPusher();
    expect((await p.subscribe(name, await authFor(p, name))).event).toBe("pusher_internal:subscription_succeeded");
    const from = p.events.length;
    await clientEventConfigured(p.socketId, e, "client-forged", name, '"x"');
    const error = await p.next((ev) => ev.event === "pusher:error", from);
    expect(error.data).toMatchObject({ code: 4300 });
    expect(JSON.stringify(error.data)).toContain("analytics channel");
    expect(await historyOf(`pusher:${name}`, reader)).toEqual([]);
    p.ws.close();
  });
});

describe("resume on the analytics channel", () => {
  it("a replay past the 1 MiB bound ends with close 4008, and resuming from the last seq continues", async () => {
    const r = await record();
    const pad = "x".repeat(30_000);
    await append(
      r.stub,
      r.name,
      Array.from({ length: 200 }, (_, i) => ({
        ...copyOf(i, "public:src.big", Date.now()),
        data: JSON.stringify({ i, pad }),
      })),
    );
    // Each replay stops after 1 MiB (about 34 of these) and closes with 4008; resuming from the last
    // seq received continues, until the last replay fits and the socket stays open, live.
    const seen: number[] = [];
    for (let round = 0; round < 20 && seen.length < 200; round++) {
      const sub = await openSocket(r.name, `?after=${seen.at(-1) ?? 0}&token=${r.token}`);
      const closed = new Promise<number>((res) => sub.ws.addEventListener("close", (ev) => res(ev.code)));
      const outcome = await Promise.race([closed, sub.next(200 - seen.length).then(() => "all" as const)]);
      seen.push(...sub.frames.map((f) => f.seq));
      if (outcome === "all") {
        sub.ws.close();
        break;
      }
      expect(outcome).toBe(4008);
      expect(sub.frames.length).toBeGreaterThan(0);
    }
    expect(seen).toEqual(Array.from({ length: 200 }, (_, i) => i + 1));
  });
});

describe("export", () => {
  // The export reads the record in RECORD_BUCKET: its contents are tested in
  // test/worker/record/record-bucket.test.ts.
  async function exportOf(r: Awaited<ReturnType<typeof record>>, query: string, headers = adminHeaders()) {
    const ctx = createExecutionContext();
    const res = await worker.fetch(new Request(`${BASE}/v1/admin/analytics/export${query}`, { headers }), r.env, ctx);
    await waitOnExecutionContext(ctx);
    return { res };
  }

  it("refuses missing or bad parameters with 400, and callers without the admin bearer with 401", async () => {
    const r = await record();
    for (const q of [
      "",
      "?from=1",
      "?to=1",
      "?from=abc&to=5",
      "?from=5&to=1",
      "?from=5&to=5",
      "?from=-1&to=5",
      "?from=1&to=5&source_channel=bad",
    ]) {
      const { res } = await exportOf(r, q);
      expect(res.status, q).toBe(400);
      expect(await res.json()).toMatchObject({ code: "invalid_argument", meta: { code: "INVALID_ARGUMENT" } });
    }
    const { res } = await exportOf(r, "?from=1&to=5", { authorization: `Bearer ${r.token}` });
    expect(res.status).toBe(401);
  });
});

describe("reconciliation under a flood past the byte cap", () => {
  it("counts every copy the full isolate queue turns away while the drops queue stalls, and dropped = recorded + failed", async () => {
    const r = await record();
    // The drops queue stalls until every publish has answered, so copies pile up in the isolate. A
    // small MAX_MESSAGE_BYTES makes the isolate's cap small: 2 KiB × 1,024 = 2 MiB, about 530 of these
    // copies (each counted at about 3.9 KB), so 700 pass it.
    let stalled = true;
    const real = env.DROPS_QUEUE;
    const stalling = {
      sendBatch: async (messages: MessageSendRequest[], options?: QueueSendBatchOptions) => {
        await pollUntil(() => !stalled, 15_000);
        return real.sendBatch(messages, options);
      },
    } as unknown as Queue;
    const e = envWith({ ANALYTICS_CHANNEL: r.name, MAX_MESSAGE_BYTES: "2048", DROPS_QUEUE: stalling });
    const source = `public:flood.${uniq()}`;
    const { access_token } = await mint({ sub: uniq("pub"), channels: ["public:flood.*"], rl: "100000/s" });
    await setRate(source, 1);
    const metric = async () => {
      const text = await (await callAndWait("/metrics", { headers: adminHeaders() }, e)).text();
      const v = (s: string) => Number(text.match(new RegExp(`^${s.replace(/[{}"]/g, "\\$&")} (\\d+)$`, "m"))?.[1]);
      return {
        dropped: v('floodgate_messages_total{result="dropped"}'),
        copies: v("floodgate_record_copies_total"),
        failures: v("floodgate_record_failures_total"),
        analyticsFailures: v("floodgate_analytics_copy_failures_total"),
      };
    };
    const before = await metric();

    const N = 700;
    const body = JSON.stringify({ pad: "x".repeat(1900) });
    const ctxs: ExecutionContext[] = [];
    try {
      const statuses = await Promise.all(
        Array.from({ length: N }, () => {
          const ctx = createExecutionContext();
          ctxs.push(ctx);
          const req = new Request(`${BASE}/v1/publish/${source}`, {
            method: "POST",
            headers: { authorization: `Bearer ${access_token}`, "content-type": "application/json" },
            body,
          });
          return Promise.resolve(worker.fetch(req, e, ctx)).then((res) => res.status);
        }),
      );
      expect(statuses.every((s) => s === 202)).toBe(true);
    } finally {
      stalled = false;
      await Promise.all(ctxs.map((ctx) => waitOnExecutionContext(ctx)));
    }

    // The queue's consumer records what the queue took; wait until every copy is settled.
    let d = { dropped: 0, copies: 0, failures: 0, analyticsFailures: 0 };
    await until(async () => {
      const now = await metric();
      d = {
        dropped: now.dropped - before.dropped,
        copies: now.copies - before.copies,
        failures: now.failures - before.failures,
        analyticsFailures: now.analyticsFailures - before.analyticsFailures,
      };
      return d.copies + d.failures >= N;
    }, "every copy recorded or failed");
    expect(d.dropped).toBe(N);
    expect(d.failures).toBeGreaterThan(0); // the cap was passed
    expect(d.copies).toBeGreaterThan(0);
    expect(d.copies + d.failures).toBe(d.dropped);
    // The analytics channel gets exactly the copies recorded (the consumer appends after writing the
    // record), and the source channel counted every drop and failure.
    await until(async () => (await r.stub.recordCounts()).copies_total >= d.copies, "the live view");
    expect((await r.stub.recordCounts()).copies_total).toBe(d.copies);
    // Every copy turned away never reached the analytics channel: dropped = copies kept there + its failures.
    expect(d.analyticsFailures).toBe(d.failures);
    expect((await r.stub.recordCounts()).copies_kept + d.analyticsFailures).toBe(d.dropped);
    const src = (await (
      await callAndWait(`/v1/channels/${source}/stats`, { headers: adminHeaders() }, e)
    ).json()) as Record<string, number>;
    expect(src).toMatchObject({ dropped_total: N, analytics_copy_failures_total: d.failures });
  });
});
