/**
 * The Worker's publish batcher: publishes of one tick go to the channel as one call, in order, each
 * answered with its own outcome and never resent when an answer is lost; a follower takes over from a
 * leader whose request died; publishes waiting in one isolate are bounded in bytes (503, counted).
 */
import { describe, expect, it, vi } from "vitest";
import { TAKEOVER_MS } from "../../functions/coalescer";
import type { PublishCommand, PublishOutcome } from "../../src/channel/calls";
import { ChannelObject } from "../../src/channel/channel-object";
import { ApiError } from "../../src/wire/errors";
import { PUBLISH_BATCHING, PublishBatcher } from "../../src/worker/publish-batcher";
import {
  adminHeaders,
  callAndWait,
  channelStats,
  grown,
  publisher,
  publishTo,
  scrapeMetrics,
  uniq,
} from "../support/helpers";
import { signedApiCall } from "../support/pusher";

const cmd = (i: number): PublishCommand => ({
  channel: "public:a.b",
  data: `{"i":${i}}`,
  publisher: "p",
  action: "deliver",
  now: i,
});

describe("publish batcher", () => {
  it("sends publishes of one tick as one call, in order, and answers each with its own outcome", async () => {
    const sent: number[][] = [];
    const b = new PublishBatcher(async (_ch, cmds) => {
      sent.push(cmds.map((c) => c.now));
      return cmds.map(
        (c, k) =>
          ({
            status: "delivered",
            channel: c.channel,
            seq: 100 + k,
            id: `m${c.now}`,
            published_at: c.now,
            replayed: false,
          }) as PublishOutcome,
      );
    });
    const outcomes = await Promise.all([0, 1, 2, 3].map((i) => b.publish(cmd(i))));
    expect(sent).toEqual([[0, 1, 2, 3]]);
    expect(outcomes.map((o) => (o as { id: string }).id)).toEqual(["m0", "m1", "m2", "m3"]);
    expect(b.calls).toBe(1);
  });

  it("followers of a batch whose answer never comes fail after their patience and are never resent", async () => {
    vi.useFakeTimers();
    try {
      let calls = 0;
      const b = new PublishBatcher(() => {
        calls++;
        return new Promise<never>(() => {}); // the call is lost
      });
      void b.publish(cmd(0)).catch(() => {});
      const followers = [1, 2, 3].map((i) =>
        b.publish(cmd(i)).then(
          () => "answered",
          (e: Error) => e.message,
        ),
      );
      await vi.advanceTimersByTimeAsync(PUBLISH_BATCHING.patienceMs + 50);
      expect(await Promise.all(followers)).toEqual(Array(3).fill("publish batch got no answer"));
      expect(calls).toBe(1);
    } finally {
      vi.useRealTimers();
    }
  });
});

describe("a batch leader whose request dies before it sends", () => {
  it("is taken over by a follower within TAKEOVER_MS: every publish is answered once, in order, none lost", async () => {
    vi.useFakeTimers();
    try {
      const sent: number[][] = [];
      const b = new PublishBatcher(async (_ch, cmds) => {
        sent.push(cmds.map((c) => c.now));
        return cmds.map(
          (c) =>
            ({
              status: "delivered",
              channel: c.channel,
              seq: c.now + 1,
              id: `m${c.now}`,
              published_at: c.now,
              replayed: false,
            }) as PublishOutcome,
        );
      });
      // The leader's request is gone: the timers it sets never fire, so on its own it never sends.
      const realSetTimeout = globalThis.setTimeout;
      globalThis.setTimeout = (() => 0) as unknown as typeof setTimeout;
      let leader: Promise<PublishOutcome>;
      try {
        leader = b.publish(cmd(0));
      } finally {
        globalThis.setTimeout = realSetTimeout;
      }
      void leader.catch(() => {});
      const followers = [1, 2, 3].map((i) =>
        b.publish(cmd(i)).then(
          (o) => (o as { id: string }).id,
          (e: Error) => e.message,
        ),
      );
      await vi.advanceTimersByTimeAsync(TAKEOVER_MS + 50);
      expect(await Promise.all(followers)).toEqual(["m1", "m2", "m3"]);
      // The dead leader's message went out with them, once: nothing accepted is lost or doubled.
      expect(sent).toEqual([[0, 1, 2, 3]]);
      // And the channel's lane is free: the next publish goes straight through.
      const next = b.publish(cmd(4));
      await vi.advanceTimersByTimeAsync(10);
      expect(((await next) as { id: string }).id).toBe("m4");
      expect(b.calls).toBe(2);
    } finally {
      vi.useRealTimers();
    }
  });
});

describe("byte cap on waiting publishes", () => {
  it("refuses a publish past the cap with 503 unavailable and Retry-After, counts it, and frees the bytes on answer", async () => {
    let release = false;
    let overflows = 0;
    const b = new PublishBatcher(
      async (_ch, cmds) => {
        while (!release) await new Promise((r) => setTimeout(r, 1));
        return cmds.map(
          (c) =>
            ({
              status: "delivered",
              channel: c.channel,
              seq: c.now,
              id: `m${c.now}`,
              published_at: c.now,
              replayed: false,
            }) as PublishOutcome,
        );
      },
      { maxBytes: 10_000, onOverflow: () => overflows++ },
    );
    const big = (i: number): PublishCommand => ({ ...cmd(i), data: JSON.stringify("x".repeat(3000)) });
    const waiting = [0, 1, 2].map((i) => b.publish(big(i)));
    const refused = await b.publish(big(3)).then(
      () => null,
      (e: ApiError) => e,
    );
    expect(refused).toBeInstanceOf(ApiError);
    expect(refused?.status).toBe(503);
    expect(refused?.toBody().code).toBe("unavailable");
    expect(refused?.headers["retry-after"]).toBe("1");
    expect(new Headers(refused?.headers).get("floodgate-refusal")).toBe("publish_overflow");
    expect(overflows).toBe(1);
    release = true;
    expect((await Promise.all(waiting)).map((o) => (o as { id: string }).id)).toEqual(["m0", "m1", "m2"]);
    expect(b.queuedBytes).toBe(0);
    expect(((await b.publish(big(4))) as { id: string }).id).toBe("m4");
  });
});

describe("memory is bounded by bytes", () => {
  it("publishes waiting in one isolate past the byte cap get 503 unavailable with Retry-After, counted as publish_overflow; the rest are delivered", async () => {
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
    const scraped = await scrapeMetrics();
    const body = "x".repeat(30_000);
    let answers: Response[];
    let viaPusher: Response;
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
      // The Pusher HTTP API's publishes wait in the same isolate: refused the same way, with a text body.
      viaPusher = await signedApiCall("POST", "/apps/test-app/events", {}, { name: "e", channel: uniq(), data: body });
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
    expect(over[0]?.headers.get("floodgate-refusal")).toBe("publish_overflow");
    expect(await over[0]?.json()).toMatchObject({ code: "unavailable", meta: { code: "UNAVAILABLE" } });
    expect(viaPusher.status).toBe(503);
    expect(viaPusher.headers.get("floodgate-refusal")).toBe("publish_overflow");
    expect(viaPusher.headers.get("retry-after")).toBe("1");
    // Every accepted publish was delivered; every refused one was counted, as a refusal by its reason too.
    expect((await channelStats(ch)).delivered_total).toBe(ok.length);
    expect((await metric()) - before).toBe(over.length + 1);
    const refused = grown(scraped, await scrapeMetrics());
    expect(refused['floodgate_refusals_total{reason="publish_overflow"}']).toBe(over.length + 1);
    expect(refused['floodgate_refusals_total{reason="unavailable"}']).toBeUndefined();
  });
});
