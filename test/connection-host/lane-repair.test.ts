/**
 * A connection host's lane repairs the holes in its channel's calls (docs/api.md, "The Pusher door";
 * src/connection-host/lane.ts, with the relay's own repair, src/relay/gap-repair.ts): calls to the
 * host that failed are fetched from the channel's history before anything newer, so a Pusher
 * connection gets every message once and in order; a hole history no longer holds closes every
 * connection on the lane with 4200 (reconnect and subscribe again), one too big to fetch in one page
 * with 4100 (over capacity), each ended subscription counted (`history_gap`, `slow`; a slow one in
 * its channel's `slow_consumers_closed` too). Real Pusher connections through the Worker, the host's deliveries made
 * to fail as a restart or a lost call would (the relay's side: test/relay/fan-out.test.ts).
 */
import { afterEach, describe, expect, it } from "vitest";
import { ConnectionHost } from "../../src/connection-host/connection-host";
import {
  channelStats,
  envWith,
  grown,
  SLOW_TEST_MS,
  scrapeMetrics,
  uniq,
  until,
  withFailing,
} from "../support/helpers";
import { closePushers, got, numbers, openPusher, publishEvent, pusherPublisher } from "../support/pusher";

afterEach(closePushers);

const closes = (reason: string) => `floodgate_subscriptions_closed_total{reason="${reason}"}`;

/**
 * Waits until the subscriptions Floodgate ended for `reason` grew by `n` since `before` (the host
 * flushes on its own timer), and no more: nothing counted twice.
 */
async function closedBy(before: Record<string, number>, reason: string, n: number): Promise<void> {
  await until(async () => (grown(before, await scrapeMetrics())[closes(reason)] ?? 0) >= n, `${n} closes (${reason})`);
  expect(grown(before, await scrapeMetrics())[closes(reason)]).toBe(n);
}

/**
 * Runs `run` while every delivery from a channel to a connection host fails, as a call lost to a
 * restart does (the channel does not send its frames again: the lane must fetch them); answers once
 * at least one failed.
 */
async function withDeliveriesFailing(run: () => Promise<void>): Promise<void> {
  let failed = 0;
  await withFailing(
    ConnectionHost,
    "deliver",
    "host aborted",
    async () => {
      await run();
      await until(() => failed > 0, "a delivery to the host to fail");
    },
    () => {
      failed++;
      return true;
    },
  );
}

describe("a connection host's lane", () => {
  it("repairs a hole from history before anything newer: every message once, in order, even if the channel goes quiet", async () => {
    const name = uniq("repair-");
    const t = await pusherPublisher();
    const subs = [await openPusher(), await openPusher()];
    for (const p of subs) expect((await p.subscribe(name)).event).toBe("pusher_internal:subscription_succeeded");
    await publishEvent(name, t, 1);
    for (const p of subs) await got(p, name, 1);
    await withDeliveriesFailing(async () => {
      for (let i = 2; i <= 4; i++) await publishEvent(name, t, i);
    });
    // No publish follows: the channel's line retries with its head, and the lane fetches the hole.
    for (const p of subs) await got(p, name, 4);
    await publishEvent(name, t, 5);
    for (const p of subs) await got(p, name, 5);
    for (const p of subs) expect(numbers(p, name)).toEqual([1, 2, 3, 4, 5]);
  });

  it("closes every connection on the lane with 4200 when history no longer holds the hole, sending nothing across it", {
    timeout: SLOW_TEST_MS,
  }, async () => {
    const name = uniq("gone-");
    const t = await pusherPublisher();
    const subs = [await openPusher(), await openPusher()];
    for (const p of subs) expect((await p.subscribe(name)).event).toBe("pusher_internal:subscription_succeeded");
    // One of them holds a second channel: it ends with its connection, for the same reason.
    expect((await subs[0]?.subscribe(uniq("beside-")))?.event).toBe("pusher_internal:subscription_succeeded");
    await publishEvent(name, t, 1);
    for (const p of subs) await got(p, name, 1);
    const before = await scrapeMetrics();
    // The host misses 110 messages: more than HISTORY_LIMIT (100) keeps.
    await withDeliveriesFailing(async () => {
      for (let i = 2; i <= 111; i++) await publishEvent(name, t, i);
    });
    await publishEvent(name, t, 112);
    for (const p of subs) {
      expect(await p.closed).toEqual({ code: 4200, reason: "missed messages are no longer in history; reconnect" });
      expect(numbers(p, name)).toEqual([1]);
    }
    // Counted per subscription Floodgate ended, as a relay counts its subscribers: three.
    await closedBy(before, "history_gap", 3);
    // Reconnecting and subscribing again, as Pusher clients do on 4200, gets what comes next.
    const back = await openPusher();
    expect((await back.subscribe(name)).event).toBe("pusher_internal:subscription_succeeded");
    await publishEvent(name, t, 113);
    await got(back, name, 113);
    expect(numbers(back, name)).toEqual([113]);
  });

  it("closes every connection on the lane with 4100 when the hole is more than a page (4 MiB) to fetch", {
    timeout: SLOW_TEST_MS,
  }, async () => {
    const name = uniq("too-big-");
    // Messages of 100 KB, through a Worker that takes them: 60 of them (6 MB, all within HISTORY_LIMIT)
    // leave a hole past 4 MiB even after the channel's line keeps its last 1 MiB for the host.
    const big = envWith({ MAX_MESSAGE_BYTES: "131072" });
    const pad = "x".repeat(100_000);
    const t = await pusherPublisher();
    const subs = [await openPusher(), await openPusher()];
    for (const p of subs) expect((await p.subscribe(name)).event).toBe("pusher_internal:subscription_succeeded");
    await publishEvent(name, t, 1);
    for (const p of subs) await got(p, name, 1);
    const before = await scrapeMetrics();
    const slowBefore = (await channelStats(`pusher:${name}`)).slow_consumers_closed;
    await withDeliveriesFailing(async () => {
      for (let i = 2; i <= 61; i++) await publishEvent(name, t, i, pad, big);
    });
    await publishEvent(name, t, 62);
    for (const p of subs) {
      expect(await p.closed).toEqual({ code: 4100, reason: "too far behind on a channel; reconnect" });
      expect(numbers(p, name)).toEqual([1]);
    }
    // Too far behind to fetch is slowness, as a relay counts the same hole.
    await closedBy(before, "slow", 2);
    // And the channel's own stat hears it from the host, as from a relay.
    await until(
      async () => (await channelStats(`pusher:${name}`)).slow_consumers_closed === slowBefore + 2,
      "the channel's slow_consumers_closed",
    );
  });
});
