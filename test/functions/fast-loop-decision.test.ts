/** The fast loop's decision at the end of a period (functions/fast-loop.ts), on its own. */
import { describe, expect, it } from "vitest";
import { fastLoopStep } from "../../functions/fast-loop";

const PERIOD = 5_000;
const NOW = 1_000_000;
const target = { kind: "messages" as const, perSecond: 10 };

describe("fastLoopStep", () => {
  it("offered over target: the rate that lets the target through, and the next period", () => {
    // 200 messages in 5 s is 40/s against 10/s: three in four are dropped.
    const step = fastLoopStep({ delivered: 150, dropped: 50, elapsedMs: PERIOD, occupancy: 1 }, 0, target, PERIOD, NOW);
    expect(step).toEqual({ rate: 0.75, dueAt: NOW + PERIOD });
  });

  it("busy under target: rate 0, and the loop goes on while traffic comes", () => {
    const step = fastLoopStep({ delivered: 20, dropped: 0, elapsedMs: PERIOD, occupancy: 3 }, 0.5, target, PERIOD, NOW);
    expect(step).toEqual({ rate: 0, dueAt: NOW + PERIOD });
  });

  it("a period with no traffic releases the rate to 0 and stops the loop", () => {
    const step = fastLoopStep({ delivered: 0, dropped: 0, elapsedMs: PERIOD, occupancy: 0 }, 0.9, target, PERIOD, NOW);
    expect(step).toEqual({ rate: 0, dueAt: 0 });
  });

  it("a period with no length keeps the current rate, and a throttled channel keeps running", () => {
    const step = fastLoopStep({ delivered: 0, dropped: 0, elapsedMs: 0, occupancy: 0 }, 0.4, target, PERIOD, NOW);
    expect(step).toEqual({ rate: 0.4, dueAt: NOW + PERIOD });
  });

  it("a delivery target is shared by the subscribers", () => {
    // 20 messages/s to 4 subscribers is 80 deliveries/s against 40/s: half are dropped.
    const deliveries = { kind: "deliveries" as const, perSecond: 40 };
    const step = fastLoopStep(
      { delivered: 100, dropped: 0, elapsedMs: PERIOD, occupancy: 4 },
      0,
      deliveries,
      PERIOD,
      NOW,
    );
    expect(step).toEqual({ rate: 0.5, dueAt: NOW + PERIOD });
  });

  it("no target: the loop stops and the rate is released", () => {
    const step = fastLoopStep(
      { delivered: 500, dropped: 500, elapsedMs: PERIOD, occupancy: 1 },
      0.8,
      null,
      PERIOD,
      NOW,
    );
    expect(step).toEqual({ rate: 0, dueAt: 0 });
  });

  it("with 30% priority traffic: the rest is dropped at 1 − (T − P)/N so the period delivers the target", () => {
    // 100 messages in 5 s (20/s), 30 of them priority (6/s): (10 − 6) / 14 of the rest may pass.
    const step = fastLoopStep(
      { delivered: 100, dropped: 0, priority: 30, elapsedMs: PERIOD, occupancy: 1 },
      0,
      target,
      PERIOD,
      NOW,
    );
    expect(step.rate).toBeCloseTo(1 - 4 / 14, 4);
    expect(step.dueAt).toBe(NOW + PERIOD);
    const delivered = 30 + 70 * (1 - step.rate);
    expect(Math.abs(delivered - 50)).toBeLessThan(0.01);
  });

  it("priority traffic above the target: every other message is dropped", () => {
    const step = fastLoopStep(
      { delivered: 80, dropped: 40, priority: 80, elapsedMs: PERIOD, occupancy: 1 },
      1,
      target,
      PERIOD,
      NOW,
    );
    expect(step).toEqual({ rate: 1, dueAt: NOW + PERIOD });
  });
});
