/**
 * Nothing accepted is lost, end to end in workerd: whatever the drop rate, every message that answered
 * 200 reaches every subscriber exactly once in seq order, every message that answered 202 is on the
 * analytics channel exactly once, retries with an Idempotency-Key change nothing, and the counters and
 * metrics agree with the answers — with the channel's subscribers on one relay, and on a relay each
 * (RELAY_CAPACITY 1: every batch crosses several relays, and the resume lands on a new one).
 */

import { createExecutionContext } from "cloudflare:test";
import { describe, expect, it } from "vitest";
import worker from "../../../src/index";
import {
  adminHeaders,
  BASE,
  callAndWait,
  collectSse,
  env,
  envWith,
  type Frame,
  freshIp,
  mint,
  openSocket,
  publishAndWait,
  SLOW_TEST_MS,
  setRate,
  uniq,
  until,
  untilUnsubscribed,
} from "../../support/helpers";

const ANALYTICS = "private:floodgate.analytics.dropped";

async function messageCounts(): Promise<{ delivered: number; dropped: number; recorded: number }> {
  const text = await (await callAndWait("/metrics", { headers: adminHeaders() })).text();
  const value = (series: string) => Number(text.match(new RegExp(`^${series} (\\d+)$`, "m"))?.[1] ?? 0);
  return {
    delivered: value('floodgate_messages_total\\{result="delivered"\\}'),
    dropped: value('floodgate_messages_total\\{result="dropped"\\}'),
    recorded: value("floodgate_record_copies_total"),
  };
}

describe.each([
  ["on one relay", env],
  ["on a relay each", envWith({ RELAY_CAPACITY: "1" })],
])("zero loss under throttling, subscribers %s", (_name, subscribeEnv) => {
  it("every 200 reaches every subscriber once in order, every 202 is on the analytics channel once", {
    timeout: SLOW_TEST_MS,
  }, async () => {
    const ch = `public:zero.${uniq()}`;
    const publisher = (await mint({ sub: uniq("pub"), channels: ["public:zero.*"], rl: "100000/s" })).access_token;
    const analyst = (await mint({ sub: uniq("analyst"), channels: ["private:floodgate.analytics.dropped"] }))
      .access_token;
    await setRate(ch, 0.4);
    const metricsBefore = await messageCounts();

    const wsA = await openSocket(ch, "", subscribeEnv);
    let wsB = await openSocket(ch, "", subscribeEnv);
    const sseRes = await worker.fetch(
      new Request(`${BASE}/v1/subscribe/${ch}`, {
        headers: { accept: "text/event-stream", "cf-connecting-ip": freshIp() },
      }),
      subscribeEnv,
      createExecutionContext(),
    );
    expect(sseRes.status).toBe(200);
    const sse = collectSse(sseRes);
    const analytics = await openSocket(ANALYTICS, `?token=${analyst}`, subscribeEnv);
    const analyticsBefore = analytics.frames.length;

    const delivered = new Map<number, number>(); // payload i → seq
    const dropped = new Set<number>();
    const framesB: Frame[] = [];
    const N = 300;
    for (let i = 0; i < N; i++) {
      if (i === 120) {
        // Subscriber B disconnects mid-run and later resumes from the last seq it saw.
        framesB.push(...wsB.frames);
        wsB.ws.close();
      }
      if (i === 200) {
        const last = framesB.length ? (framesB[framesB.length - 1] as Frame).seq : 0;
        wsB = await openSocket(ch, `?after=${last}`, subscribeEnv);
      }
      const key = i % 7 === 0 ? `k-${i}` : undefined;
      const headers: Record<string, string> = key ? { "idempotency-key": key } : {};
      const res = await publishAndWait(ch, publisher, { i, note: `message ${i}` }, headers);
      const body = (await res.json()) as { status: string; seq?: number };
      if (res.status === 200) delivered.set(i, body.seq as number);
      else if (res.status === 202) dropped.add(i);
      else throw new Error(`publish ${i} answered ${res.status}`);
      if (key) {
        // A retry with the same key answers the first result again and delivers nothing twice.
        const again = await publishAndWait(ch, publisher, { i, note: `message ${i}` }, headers);
        expect(again.status).toBe(res.status);
        expect(await again.json()).toEqual(body);
      }
    }

    expect(delivered.size + dropped.size).toBe(N);
    expect(delivered.size).toBeGreaterThan(100);
    expect(dropped.size).toBeGreaterThan(60);

    const expected = [...delivered].sort((a, b) => a[1] - b[1]);
    const check = (frames: Frame[], who: string) => {
      expect(
        frames.map((f) => [(f.data as { i: number }).i, f.seq]),
        who,
      ).toEqual(expected);
    };
    await wsA.next(delivered.size);
    check(wsA.frames, "WebSocket A");
    await until(() => sse.frames.length >= delivered.size, "SSE frames");
    check(sse.frames, "SSE");
    await until(() => framesB.length + wsB.frames.length >= delivered.size, "resumed WebSocket B");
    check([...framesB, ...wsB.frames], "WebSocket B across a disconnect and ?after= resume");

    await until(() => analytics.frames.length - analyticsBefore >= dropped.size, "analytics copies");
    const copies = analytics.frames
      .slice(analyticsBefore)
      .map((f) => f.data as { source_channel: string; message: { i: number }; drop_rate: number })
      .filter((c) => c.source_channel === ch);
    expect(copies.map((c) => c.message.i).sort((a, b) => a - b)).toEqual([...dropped].sort((a, b) => a - b));
    expect(copies.every((c) => c.drop_rate === 0.4)).toBe(true);

    const stats = (await (await callAndWait(`/v1/channels/${ch}/stats`, { headers: adminHeaders() })).json()) as {
      delivered_total: number;
      dropped_total: number;
      last_seq: number;
      relays: number;
    };
    expect(stats).toMatchObject({
      delivered_total: delivered.size,
      dropped_total: dropped.size,
      last_seq: delivered.size,
      relays: subscribeEnv === env ? 1 : 3,
    });
    const metricsAfter = await messageCounts();
    expect(metricsAfter.delivered - metricsBefore.delivered).toBe(delivered.size);
    expect(metricsAfter.dropped - metricsBefore.dropped).toBe(dropped.size);
    // Every drop is in the record too. Waiting for it also ends the test only once the drops queue's
    // consumer has finished with this test's copies (the live view gets them before it acknowledges),
    // so none of its work is left running when the file's environment is torn down.
    await until(
      async () => (await messageCounts()).recorded - metricsBefore.recorded >= dropped.size,
      "every drop in the record",
    );
    expect((await messageCounts()).recorded - metricsBefore.recorded).toBe(dropped.size);

    for (const s of [wsA, wsB, analytics]) s.ws.close();
    await sse.close();
    await untilUnsubscribed(ch, ANALYTICS);
  });
});
