/**
 * Bounded under abuse, the objects' side (docs/security.md): subscribers cannot make a channel work
 * by talking to it, slow subscribers and replays are bounded in bytes, a failed batch leaves no ghost
 * frames, and storage is bounded by activity — idle channels, Idempotency-Keys and full rate-limit
 * buckets are deleted by their object's alarm. Times are moved back in storage; alarms are run with
 * runDurableObjectAlarm.
 */
import { evictDurableObject, runDurableObjectAlarm, runInDurableObject } from "cloudflare:test";
import { env } from "cloudflare:workers";
import { describe, expect, it } from "vitest";
import type { ChannelStats } from "../../src/channel/calls";
import { ChannelObject } from "../../src/channel/channel-object";
import { UNUSED_CHANNEL_TTL_MS, WIPE_RETRY_MS } from "../../src/channel/idle-expiry";
import { shardStub } from "../../src/limiter/limiter-shard";
import { SLOW_CONSUMER_CLOSE, SUBSCRIBER_MAX_BEHIND_BYTES, SUBSCRIBER_SPOKE_CLOSE } from "../../src/relay/bounds";
import { relayName } from "../../src/relay/placement";
import { backdateIdle, counter, lapseReservations, withFailingAppend } from "../support/channel-internals";
import {
  adminHeaders,
  call,
  callAndWait,
  type Frame,
  mint,
  openSocket,
  publisher,
  publishTo,
  readSse,
  storedTables,
  uniq,
  until,
} from "../support/helpers";

const channelStub = (ch: string) => env.CHANNEL.get(env.CHANNEL.idFromName(ch));
/** The channel's only relay (fewer subscribers than RELAY_CAPACITY; no colo locally). */
const relayStub = (ch: string) => env.RELAY.get(env.RELAY.idFromName(relayName(ch, "local", 0)));

async function channelStats(ch: string): Promise<ChannelStats> {
  const res = await callAndWait(`/v1/channels/${ch}/stats`, { headers: adminHeaders() });
  return (await res.json()) as ChannelStats;
}

/** A raw WebSocket subscription that records text frames and its close. */
async function rawSocket(ch: string, query = "") {
  const res = await call(`/v1/subscribe/${ch}${query}`, { headers: { upgrade: "websocket" } });
  const ws = res.webSocket;
  if (res.status !== 101 || !ws) throw new Error(`subscribe failed: ${res.status}`);
  const texts: string[] = [];
  let close: { code: number; reason: string } | null = null;
  ws.addEventListener("message", (ev) => {
    texts.push(ev.data as string);
  });
  ws.addEventListener("close", (ev) => {
    close = { code: ev.code, reason: ev.reason };
  });
  ws.accept();
  return { ws, texts, closed: () => close };
}

/** Big messages straight into the channel's object, `n` per call. */
async function fill(ch: string, count: number, bytes: number): Promise<void> {
  const big = "x".repeat(bytes);
  for (let i = 0; i < count; i += 10) {
    await channelStub(ch).publishMany(
      Array.from({ length: Math.min(10, count - i) }, (_, k) => ({
        channel: ch,
        data: JSON.stringify({ i: i + k, big }),
        publisher: "p",
        action: "deliver" as const,
        now: Date.now(),
      })),
    );
  }
}

describe("subscribers do not talk", () => {
  it("ping is answered pong by the runtime; any other frame, however big, closes that socket with 1008", async () => {
    const ch = `public:bounds.${uniq()}`;
    const t = await publisher("public:bounds.*");
    const pinger = await rawSocket(ch);
    const talker = await rawSocket(ch);
    const giant = await rawSocket(ch);
    const listener = await openSocket(ch);
    pinger.ws.send("ping");
    await until(() => pinger.texts.length === 1, "pong");
    expect(pinger.texts).toEqual(["pong"]);
    // Answered without the object's handler: the runtime's auto-response timestamp is set.
    const autoAnswered = await runInDurableObject(relayStub(ch), (_i, state) =>
      state.getWebSockets().map((ws) => state.getWebSocketAutoResponseTimestamp(ws) !== null),
    );
    expect(autoAnswered.filter(Boolean)).toHaveLength(1);

    talker.ws.send("hello");
    giant.ws.send("x".repeat(1024 * 1024));
    await until(() => talker.closed() !== null && giant.closed() !== null, "the talkers' close");
    expect(talker.closed()).toMatchObject({ code: SUBSCRIBER_SPOKE_CLOSE });
    expect(giant.closed()).toMatchObject({ code: SUBSCRIBER_SPOKE_CLOSE });

    // Nothing was published, the pinger is still open, and everyone else still gets messages.
    expect((await channelStats(ch)).last_seq).toBe(0);
    expect((await publishTo(ch, t, "after")).status).toBe(200);
    expect((await listener.next(1)).map((f) => [f.seq, f.data])).toEqual([[1, "after"]]);
    await until(() => pinger.texts.length === 2, "the pinger's frame");
    expect(pinger.closed()).toBeNull();
    let websockets = 0;
    for (let i = 0; i < 1000 && websockets !== 2; i++) websockets = (await channelStats(ch)).websockets;
    expect(websockets).toBe(2);
    pinger.ws.close();
    listener.ws.close();
  });
});

describe("slow subscribers are bounded in bytes, replays included", () => {
  const total = 100; // HISTORY_LIMIT: all retained
  const size = 30_000; // 3 MB of history, three times the bound

  it("a WebSocket replay sends at most 1 MiB, closes with 4008, and resuming with ?after= brings the rest", async () => {
    const ch = `public:bounds.${uniq()}`;
    await fill(ch, total, size);
    const seqs: number[] = [];
    let after = 0;
    let closes = 0;
    for (let round = 0; round < 10 && seqs.length < total; round++) {
      const sub = await rawSocket(ch, `?after=${after}`);
      if (seqs.length + 0 < total) {
        await until(() => sub.closed() !== null || seqs.length + sub.texts.length === total, "replay");
      }
      const got = sub.texts.map((t) => JSON.parse(t) as Frame);
      const bytes = sub.texts.reduce((a, t) => a + new TextEncoder().encode(t).byteLength, 0);
      expect(bytes).toBeLessThanOrEqual(SUBSCRIBER_MAX_BEHIND_BYTES);
      if (sub.closed()) {
        closes++;
        expect(sub.closed()).toMatchObject({ code: SLOW_CONSUMER_CLOSE });
      } else sub.ws.close();
      seqs.push(...got.map((f) => f.seq));
      after = seqs.at(-1) ?? after;
    }
    expect(seqs).toEqual(Array.from({ length: total }, (_, i) => i + 1));
    expect(closes).toBeGreaterThanOrEqual(2);
    expect((await channelStats(ch)).slow_consumers_closed).toBe(closes);
  });

  it("an SSE replay sends at most 1 MiB and ends; Last-Event-ID brings the rest", async () => {
    const ch = `public:bounds.${uniq()}`;
    await fill(ch, total, size);
    const first = await call(`/v1/subscribe/${ch}?after=0`, { headers: { accept: "text/event-stream" } });
    const head = await readSse(first, total); // returns when the stream ends
    expect(head.length).toBeGreaterThan(0);
    expect(head.length).toBeLessThan(total);
    expect(head.map((e) => Number(e.id))).toEqual(Array.from({ length: head.length }, (_, i) => i + 1));
    expect(head.length * size).toBeLessThanOrEqual(SUBSCRIBER_MAX_BEHIND_BYTES);
    const seqs = head.map((e) => Number(e.id));
    for (let round = 0; round < 10 && seqs.length < total; round++) {
      const res = await call(`/v1/subscribe/${ch}`, {
        headers: { accept: "text/event-stream", "last-event-id": String(seqs.at(-1)) },
      });
      const events = await readSse(res, total - seqs.length);
      seqs.push(...events.map((e) => Number(e.id)));
    }
    expect(seqs).toEqual(Array.from({ length: total }, (_, i) => i + 1));
  });

  it("a live SSE reader more than 1 MiB behind is cut off (in bytes, not frames); a reading one gets everything", async () => {
    const ch = `public:bounds.${uniq()}`;
    const stalled = await call(`/v1/subscribe/${ch}`, { headers: { accept: "text/event-stream" } });
    expect(stalled.status).toBe(200); // never read from until the end
    const live = await openSocket(ch);
    await fill(ch, total, size); // 100 frames: far fewer than any frame-count bound
    const frames = await live.next(total);
    expect(frames.map((f) => (f.data as { i: number }).i)).toEqual(Array.from({ length: total }, (_, i) => i));
    expect(await channelStats(ch)).toMatchObject({ sse: 0, websockets: 1, slow_consumers_closed: 1 });
    live.ws.close();
    const kept = await readSse(stalled, total);
    expect(kept.length).toBeLessThan(total);
    expect(kept.map((e) => Number(e.id))).toEqual(Array.from({ length: kept.length }, (_, i) => i + 1));
  });
});

/** A publish of `data` (any JSON value) as the Worker sends it to the channel's object. */
function deliverCommand(ch: string, data: unknown) {
  return { channel: ch, data: JSON.stringify(data), publisher: "p", action: "deliver" as const, now: Date.now() };
}

/**
 * One batch of publishes whose second append fails with SQLITE_FULL, after the first was appended:
 * answers the error message the call got (or "answered" if it did not fail).
 */
function publishManyFailingMidway(ch: string, messages: unknown[]): Promise<string> {
  let appends = 0;
  return withFailingAppend(
    "SQLITE_FULL: database or disk is full",
    () =>
      channelStub(ch)
        .publishMany(messages.map((m) => deliverCommand(ch, m)))
        .then(
          () => "answered",
          (e: Error) => e.message,
        ),
    () => ++appends === 2,
  );
}

describe("a batch that fails mid-way", () => {
  it("rolls back memory with storage: no ghost frames, no counted messages, seq continues where it was", async () => {
    const ch = `public:bounds.${uniq()}`;
    const t = await publisher("public:bounds.*");
    const sub = await openSocket(ch);
    expect((await publishTo(ch, t, "first")).status).toBe(200);
    await sub.next(1);
    const failed = await publishManyFailingMidway(ch, ["a", "b", "c"]);
    expect(failed).toMatch(/SQLITE_FULL/);
    expect((await publishTo(ch, t, "after")).status).toBe(200);
    const frames = await sub.next(2);
    expect(frames.map((f) => [f.seq, f.data])).toEqual([
      [1, "first"],
      [2, "after"],
    ]);
    expect(await channelStats(ch)).toMatchObject({ last_seq: 2, delivered_total: 2 });
    sub.ws.close();
  });
});

describe("a failed batch and the alarm", () => {
  it("a channel's alarm survives a batch that fails: the fast loop and the idle expiry still get one", async () => {
    // A channel with a target (test config: public:fastloop.*): its first traffic asks for the fast
    // loop's alarm inside the batch's transaction, which the failure undoes.
    const ch = `public:fastloop.${uniq()}`;
    const failed = await publishManyFailingMidway(ch, ["a", "b"]);
    expect(failed).toMatch(/SQLITE_FULL/);
    await channelStub(ch).publishMany([deliverCommand(ch, "c")]);
    const { alarm, due } = await runInDurableObject(channelStub(ch), async (instance, state) => ({
      alarm: await state.storage.getAlarm(),
      due: counter(instance, "fast_due_at"),
    }));
    expect(due).toBeGreaterThan(0);
    expect(alarm).not.toBeNull();
    expect(alarm as number).toBeLessThanOrEqual(due);
  });
});

describe("storage is bounded by activity", () => {
  const HISTORY_TTL_MS = 7 * 24 * 3600 * 1000;

  /** Moves the channel's last publish back by `ms`, in storage, and evicts so memory reloads it. */
  async function ageChannel(ch: string, ms: number): Promise<void> {
    const stub = channelStub(ch);
    await runInDurableObject(stub, (_i, state) => {
      state.storage.sql.exec("UPDATE counters SET value = value - ? WHERE name = 'last_publish_at'", ms);
    });
    await evictDurableObject(stub);
  }

  it("a channel nobody used for HISTORY_TTL is deleted whole by its alarm, and works again from scratch", async () => {
    const ch = `public:bounds.${uniq()}`;
    const t = await publisher("public:bounds.*");
    expect((await publishTo(ch, t, 1, { "idempotency-key": uniq("k") })).status).toBe(200);
    expect((await publishTo(ch, t, 2)).status).toBe(200);
    const stub = channelStub(ch);
    // Not idle long enough yet: the alarm keeps everything.
    expect(await runDurableObjectAlarm(stub)).toBe(true);
    expect(await storedTables(stub)).toMatchObject({ messages: 2, idempotency: 1 });
    await ageChannel(ch, HISTORY_TTL_MS + 1000);
    expect(await runDurableObjectAlarm(stub)).toBe(true);
    expect(await storedTables(stub)).toEqual({});
    expect(await runInDurableObject(stub, (_i, state) => state.storage.getAlarm())).toBeNull();
    // Reads of a deleted channel are empty, and it starts over at seq 1.
    const history = (await (await call(`/v1/history/${ch}`)).json()) as { messages: Frame[] };
    expect(history.messages).toEqual([]);
    const again = await publishTo(ch, t, 3);
    expect(((await again.json()) as { seq: number }).seq).toBe(1);
  });

  it("a sampler visit to a deleted channel leaves nothing stored, and export of an unused record is empty", async () => {
    const ch = `public:bounds.${uniq()}`;
    const t = await publisher("public:bounds.*");
    expect((await publishTo(ch, t, 1)).status).toBe(200);
    await ageChannel(ch, HISTORY_TTL_MS + 1000);
    const stub = channelStub(ch);
    expect(await runDurableObjectAlarm(stub)).toBe(true);
    expect(await storedTables(stub)).toEqual({});
    // The sampler visits channels with a runtime target every run, idle or not.
    const now = Date.now();
    expect(await stub.takePeriod(now, "5/s")).toMatchObject({ counts: { delivered: 0, dropped: 0 } });
    await stub.recordSample({ sampled_at: now, new_rate: 0, decided_by: "sweep" });
    expect(await storedTables(stub)).toEqual({});
    expect(await runInDurableObject(stub, (_i, state) => state.storage.getAlarm())).toBeNull();
  });

  it("a channel with a subscriber is kept however old its last publish; deleted once the subscriber leaves", async () => {
    const ch = `public:bounds.${uniq()}`;
    const t = await publisher("public:bounds.*");
    const sub = await openSocket(ch);
    expect((await publishTo(ch, t, 1)).status).toBe(200);
    await sub.next(1);
    await ageChannel(ch, HISTORY_TTL_MS + 1000);
    expect(await runDurableObjectAlarm(channelStub(ch))).toBe(true);
    expect(await storedTables(channelStub(ch))).toMatchObject({ messages: 1 });
    sub.ws.close();
    // The close reaches the relay, whose report reaches the channel, which sets its alarm for now:
    // the TTL is long past.
    let open = 1;
    for (let i = 0; i < 200 && open > 0; i++) {
      open = await runInDurableObject(channelStub(ch), (instance) => instance.stats().occupancy);
      if (open > 0) await new Promise((r) => setTimeout(r, 5));
    }
    expect(open).toBe(0);
    // Due now, so the runtime may already have run it by itself; run it if not.
    await runDurableObjectAlarm(channelStub(ch));
    expect(await storedTables(channelStub(ch))).toEqual({});
  });

  it("reading a channel nobody used stores nothing", async () => {
    const ch = `public:bounds.${uniq()}`;
    expect((await call(`/v1/history/${ch}`)).status).toBe(200);
    expect(await channelStats(ch)).toMatchObject({ last_seq: 0, occupancy: 0 });
    expect(await storedTables(channelStub(ch))).toEqual({});
  });

  it("Idempotency-Keys are forgotten after 10 minutes by the alarm, without any further traffic", async () => {
    const ch = `public:bounds.${uniq()}`;
    const t = await publisher("public:bounds.*");
    expect((await publishTo(ch, t, 1, { "idempotency-key": uniq("k") })).status).toBe(200);
    const stub = channelStub(ch);
    expect(await storedTables(stub)).toMatchObject({ idempotency: 1, messages: 1 });
    await runInDurableObject(stub, (_i, state) => {
      state.storage.sql.exec("UPDATE idempotency SET expires_at = ?", Date.now() - 1);
    });
    expect(await runDurableObjectAlarm(stub)).toBe(true);
    // The key is gone; the channel, recently used, keeps its history.
    expect(await storedTables(stub)).toMatchObject({ idempotency: 0, messages: 1 });
  });

  it("a rate-limit bucket keeps its row in its shard until it is full again, then the shard's alarm deletes it", async () => {
    const sub = uniq("bucket");
    const key = `publish:${sub}`;
    // 10 an hour: three publishes leave it far from full for the whole test.
    const t = (await mint({ sub, channels: ["public:bounds.*"], rl: "10/h" })).access_token;
    for (let i = 0; i < 3; i++) expect((await publishTo(`public:bounds.${uniq()}`, t, i)).status).toBe(200);
    const stub = shardStub(env, key);
    const rows = () =>
      runInDurableObject(stub, (_i, state) => ({
        bucket: state.storage.sql.exec("SELECT * FROM bucket WHERE key = ?", key).toArray().length,
        lease: state.storage.sql.exec("SELECT * FROM lease WHERE key = ?", key).toArray().length,
      }));
    // Not full yet: the alarm keeps the bucket (strictness across eviction), and the next charge sees it.
    await runInDurableObject(stub, (_i, state) => {
      state.storage.sql.exec("UPDATE bucket SET full_at = 0 WHERE key = ?", key);
    });
    expect(await runDurableObjectAlarm(stub)).toBe(true);
    const kept = await stub.peek(key);
    expect(kept).not.toBeNull();
    expect(kept?.tokens).toBeLessThan(8);
    // Its lease (the first publish took a spare one) ends: its tokens count as spent from then on.
    const hourLater = () =>
      runInDurableObject(stub, (_i, state) => {
        state.storage.sql.exec("UPDATE bucket SET updated_at = updated_at - 3600000, full_at = 0 WHERE key = ?", key);
        state.storage.sql.exec("UPDATE lease SET expires_at = 0 WHERE key = ?", key);
      });
    await hourLater();
    await evictDurableObject(stub);
    expect(await runDurableObjectAlarm(stub)).toBe(true);
    // An hour after that (stored times moved back), the bucket is full: nothing is kept for it.
    await hourLater();
    await evictDurableObject(stub);
    expect(await runDurableObjectAlarm(stub)).toBe(true);
    expect(await rows()).toEqual({ bucket: 0, lease: 0 });
    // And the bucket starts full again.
    const [r] = await stub.decide([{ key, limit: { rate: 1, perMs: 3_600_000, burst: 5 }, count: 1 }]);
    expect(r).toMatchObject({ granted: 1, remaining: 4 });
  });
});

describe("made-up channels leave nothing", () => {
  async function alarmOf(stub: DurableObjectStub): Promise<number | null> {
    return runInDurableObject(stub, (_i, state) => state.storage.getAlarm());
  }

  /** Every table in the object's database, the platform's own included: 0 is an object that stores nothing. */
  async function allTables(stub: DurableObjectStub): Promise<number> {
    return runInDurableObject(
      stub,
      (_i, state) =>
        state.storage.sql.exec<{ n: number }>("SELECT COUNT(*) AS n FROM sqlite_master WHERE type = 'table'").one().n,
    );
  }

  it("a subscribe to a name with no messages, once closed, leaves no channel or relay storage a minute later", async () => {
    const ch = `public:bounds.${uniq()}`;
    const stub = channelStub(ch);
    const sub = await openSocket(ch);
    await until(async () => (await runInDurableObject(stub, (i) => i.stats().occupancy)) === 1, "the relay's report");
    expect(await storedTables(stub)).toMatchObject({ relays: 1 });
    sub.ws.close();
    await until(async () => (await runInDurableObject(stub, (i) => i.stats().occupancy)) === 0, "the leave's report");
    // The relay, empty, deleted its storage once the channel told it to leave.
    await until(async () => (await allTables(relayStub(ch))) === 0, "the relay's deletion");
    expect(await alarmOf(relayStub(ch))).toBeNull();
    // The channel's alarm comes within a minute of the leave, not HISTORY_TTL after the first use.
    const left = Date.now();
    const alarm = await alarmOf(stub);
    expect(alarm).not.toBeNull();
    expect(alarm as number).toBeLessThanOrEqual(left + UNUSED_CHANNEL_TTL_MS);
    // Before the minute is up the channel is kept (a reconnect finds it as it was)...
    await runDurableObjectAlarm(stub);
    expect(await storedTables(stub)).toMatchObject({ counters: expect.any(Number) });
    // ...and once it has passed, everything is gone, the alarm included.
    await runInDurableObject(stub, (instance) => backdateIdle(instance, UNUSED_CHANNEL_TTL_MS + 1));
    expect(await runDurableObjectAlarm(stub)).toBe(true);
    expect(await allTables(stub)).toBe(0);
    expect(await alarmOf(stub)).toBeNull();
  });

  it("a subscribe that never reached its relay (its reserved slot lapses) leaves nothing a minute later", async () => {
    const ch = `public:bounds.${uniq()}`;
    const stub = channelStub(ch);
    await stub.assignRelay(ch, "local", 1000, 100_000, "ip:test", 20);
    expect(await storedTables(stub)).toMatchObject({ meta: 1 });
    expect((await alarmOf(stub)) as number).toBeLessThanOrEqual(Date.now() + UNUSED_CHANNEL_TTL_MS);
    await runInDurableObject(stub, (instance) => {
      lapseReservations(instance);
      backdateIdle(instance, UNUSED_CHANNEL_TTL_MS + 1);
    });
    expect(await runDurableObjectAlarm(stub)).toBe(true);
    expect(await allTables(stub)).toBe(0);
    expect(await alarmOf(stub)).toBeNull();
  });

  it("a channel with a message keeps it for HISTORY_TTL after its last subscriber left, not a minute", async () => {
    const ch = `public:bounds.${uniq()}`;
    const stub = channelStub(ch);
    const sub = await openSocket(ch);
    expect((await publishTo(ch, await publisher("public:bounds.*"), 1)).status).toBe(200);
    await sub.next(1);
    sub.ws.close();
    await until(async () => (await runInDurableObject(stub, (i) => i.stats().occupancy)) === 0, "the leave's report");
    await runInDurableObject(stub, (instance) => backdateIdle(instance, UNUSED_CHANNEL_TTL_MS + 1));
    expect(await runDurableObjectAlarm(stub)).toBe(true);
    expect(await storedTables(stub)).toMatchObject({ messages: 1 });
  });

  it("history and stats reads of a name nobody used store nothing and set no alarm", async () => {
    const ch = `public:bounds.${uniq()}`;
    expect((await call(`/v1/history/${ch}?after=0`)).status).toBe(200);
    expect(await channelStats(ch)).toMatchObject({ last_seq: 0, occupancy: 0 });
    expect(await allTables(channelStub(ch))).toBe(0);
    expect(await alarmOf(channelStub(ch))).toBeNull();
  });
});

describe("an idle deletion that fails", () => {
  it("leaves the channel as it was, not deleted, and the alarm tries again", async () => {
    const ch = `public:bounds.${uniq()}`;
    expect((await publishTo(ch, await publisher("public:bounds.*"), 1)).status).toBe(200);
    const stub = channelStub(ch);
    const HISTORY_TTL_MS = 7 * 24 * 3600 * 1000;
    const failedAt = Date.now();
    await runInDurableObject(stub, async (instance, state) => {
      backdateIdle(instance, HISTORY_TTL_MS + 1000);
      const storage = state.storage as unknown as { deleteAll: () => Promise<void> };
      storage.deleteAll = () => Promise.reject(new Error("storage unavailable"));
      try {
        await instance.alarm();
      } finally {
        delete (storage as Partial<typeof storage>).deleteAll;
      }
      // Not marked deleted: memory still holds what storage holds.
      expect(counter(instance, "last_seq")).toBe(1);
    });
    expect(await storedTables(stub)).toMatchObject({ messages: 1 });
    const retry = await runInDurableObject(stub, (_i, state) => state.storage.getAlarm());
    expect(retry).not.toBeNull();
    expect(retry as number).toBeLessThanOrEqual(Date.now() + WIPE_RETRY_MS);
    expect(retry as number).toBeGreaterThanOrEqual(failedAt);
    // The retry deletes it.
    expect(await runDurableObjectAlarm(stub)).toBe(true);
    expect(await storedTables(stub)).toEqual({});
  });
});

describe("memory is bounded by bytes", () => {
  it("publishes waiting in one isolate past the byte cap get 503 unavailable with Retry-After, counted; the rest are delivered", async () => {
    const ch = `public:bounds.${uniq()}`;
    const t = await publisher("public:bounds.*");
    // The channel's object stalls (a slow storage commit) until released, so publishes pile up.
    const proto = ChannelObject.prototype as unknown as Record<string, (...a: unknown[]) => unknown>;
    const original = proto.publishMany as (...a: unknown[]) => unknown;
    let release = false;
    proto.publishMany = async function (this: unknown, ...args: unknown[]) {
      while (!release) await new Promise((r) => setTimeout(r, 2));
      return original.apply(this, args);
    };
    const metric = async () => {
      const text = await (await callAndWait("/metrics", { headers: adminHeaders() })).text();
      return Number(/^floodgate_publish_overflow_total (\d+)$/m.exec(text)?.[1] ?? "NaN");
    };
    const before = await metric();
    const body = "x".repeat(30_000);
    let answers: Response[];
    try {
      let settled = 0;
      const pending = Array.from({ length: 300 }, () =>
        publishTo(ch, t, body).then((r) => {
          settled++;
          return r;
        }),
      ); // 9 MB > the 8 MiB cap
      // Refusals answer at once, while the accepted publishes still wait.
      for (let i = 0; i < 2000 && settled === 0; i++) await new Promise((r) => setTimeout(r, 5));
      release = true;
      answers = await Promise.all(pending);
    } finally {
      proto.publishMany = original;
    }
    const over = answers.filter((r) => r.status === 503);
    const ok = answers.filter((r) => r.status === 200);
    expect(over.length).toBeGreaterThan(0);
    expect(ok.length + over.length).toBe(300);
    expect(ok.length).toBeGreaterThanOrEqual(250);
    expect(over[0]?.headers.get("retry-after")).toBe("1");
    expect(await over[0]?.json()).toMatchObject({ code: "unavailable", meta: { code: "UNAVAILABLE" } });
    // Every accepted publish was delivered; every refused one was counted.
    expect((await channelStats(ch)).delivered_total).toBe(ok.length);
    expect((await metric()) - before).toBe(over.length);
  });
});
