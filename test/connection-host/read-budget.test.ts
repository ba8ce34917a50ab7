/**
 * A Pusher connection's subscribes and its client IP's read budget (docs/api.md, "Bounds": reads
 * are budgeted), with the shipped budget: a public subscribe, or a private one signed wrong, takes one
 * token from `read:<ip>` (the connect took one already); one the app signed takes none. A limiter that
 * fails refuses the subscribe (fail closed): that channel's `pusher:subscription_error` 503.
 * test/pusher-libraries/read-budget.test.ts meets the budget's end with pusher-js.
 */
import { afterEach, describe, expect, it } from "vitest";
import { LimiterShard } from "../../src/limiter/limiter-shard";
import { adminHeaders, call, freshIp, peekBucket, uniq, withFailing } from "../support/helpers";
import { authFor, closePushers, openPusher } from "../support/pusher";

afterEach(closePushers);

describe("a Pusher connection's subscribes take from its client IP's read budget", () => {
  it("a public subscribe and a wrongly signed private one take a token each; a signed one takes none", async () => {
    const ip = freshIp();
    const p = await openPusher(undefined, undefined, { "cf-connecting-ip": ip });
    const bucket = async () => (await peekBucket(`read:${ip}`)) as { tokens: number; updatedAt: number };
    // `after` took one token from `before`, which refilled meanwhile at READ_RATE (20/s) up to READ_BURST (40).
    const tookOne = (before: { tokens: number; updatedAt: number }, after: { tokens: number; updatedAt: number }) =>
      expect(after.tokens).toBeCloseTo(Math.min(40, before.tokens + (after.updatedAt - before.updatedAt) / 50) - 1, 6);
    const connected = await bucket();
    expect(connected.tokens).toBe(39);
    expect((await p.subscribe(uniq("public-"))).event).toBe("pusher_internal:subscription_succeeded");
    const subscribed = await bucket();
    tookOne(connected, subscribed);
    const forged = await p.subscribe(`private-${uniq()}`, { auth: `test-key:${"0".repeat(64)}` });
    expect(forged).toMatchObject({ event: "pusher:subscription_error", data: { status: 401 } });
    const afterForged = await bucket();
    tookOne(subscribed, afterForged);
    const signed = `private-${uniq()}`;
    expect((await p.subscribe(signed, await authFor(p, signed))).event).toBe("pusher_internal:subscription_succeeded");
    expect(await bucket()).toEqual(afterForged);
  });

  it("a limiter that fails refuses the subscribe: subscription_error 503 Unavailable, nothing subscribed", async () => {
    const p = await openPusher();
    const name = uniq("limiter-down-");
    const refused = await withFailing(LimiterShard, "decide", "limiter down", () => p.subscribe(name));
    expect(refused).toEqual({
      event: "pusher:subscription_error",
      channel: name,
      data: { type: "Unavailable", error: "the rate limiter is temporarily unavailable; retry", status: 503 },
    });
    const stats = (await (await call(`/v1/channels/pusher:${name}/stats`, { headers: adminHeaders() })).json()) as {
      websockets: number;
    };
    expect(stats.websockets).toBe(0);
    // The limiter back: the same channel subscribes.
    expect((await p.subscribe(name)).event).toBe("pusher_internal:subscription_succeeded");
  });
});
