/** Waiting for a condition with a time bound (functions/waiting.ts), on fake timers. */
import { describe, expect, it, vi } from "vitest";
import { pollUntil } from "../../functions/waiting";

describe("pollUntil", () => {
  it("resolves true as soon as the condition holds, false after the timeout, on its own timers", async () => {
    vi.useFakeTimers();
    try {
      let ready = false;
      const hit = pollUntil(() => ready, 1000);
      await vi.advanceTimersByTimeAsync(30);
      ready = true;
      await vi.advanceTimersByTimeAsync(10);
      await expect(hit).resolves.toBe(true);
      const miss = pollUntil(() => false, 100);
      await vi.advanceTimersByTimeAsync(120);
      await expect(miss).resolves.toBe(false);
    } finally {
      vi.useRealTimers();
    }
  });

  it("checks at least once a millisecond, so a waiter learns its answer at most 1 ms late", async () => {
    vi.useFakeTimers();
    try {
      let ready = false;
      let settled = false;
      pollUntil(() => ready, 1000).then(() => {
        settled = true;
      });
      // Whenever the condition comes to hold (here just after the check at 31 ms), the next check
      // is within 1 ms: a batch's followers and the batch behind it wait no longer than that.
      await vi.advanceTimersByTimeAsync(31);
      ready = true;
      await vi.advanceTimersByTimeAsync(1);
      expect(settled).toBe(true);
    } finally {
      vi.useRealTimers();
    }
  });

  it("gives up by the clock when its timers run late, not only by the delays it asked for", async () => {
    vi.useFakeTimers();
    try {
      let settled: boolean | null = null;
      pollUntil(() => false, 1000).then((v) => {
        settled = v;
      });
      await vi.advanceTimersByTimeAsync(5);
      // A busy isolate: a second passes while the waiter's timers hardly run.
      vi.setSystemTime(Date.now() + 1000);
      await vi.advanceTimersByTimeAsync(1);
      expect(settled).toBe(false);
    } finally {
      vi.useRealTimers();
    }
  });
});
