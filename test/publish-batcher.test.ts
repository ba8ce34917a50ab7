/** The publish batcher on its own: order, one call per batch, and no resend when an answer is lost. */
import { describe, expect, it, vi } from "vitest";
import type { PublishCommand, PublishOutcome } from "../src/channel-object";
import { FOLLOWER_PATIENCE_MS, PublishBatcher } from "../src/publish-batcher";

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

  it("followers of a batch whose answer never comes fail after FOLLOWER_PATIENCE_MS and are never resent", async () => {
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
      await vi.advanceTimersByTimeAsync(FOLLOWER_PATIENCE_MS + 50);
      expect(await Promise.all(followers)).toEqual(Array(3).fill("publish batch got no answer"));
      expect(calls).toBe(1);
    } finally {
      vi.useRealTimers();
    }
  });
});
