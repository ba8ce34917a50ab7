/**
 * The sampler's registry of channels to visit is bounded whatever names a flood makes up: marks are
 * capped (the lightest, newest go first), stale marks are forgotten, and throttled channels are
 * visited in turn when more are throttled than one run visits. Each test has a registry object of
 * its own (storage is shared by the tests of this file).
 */

import { runInDurableObject } from "cloudflare:test";
import { env } from "cloudflare:workers";
import { describe, expect, it } from "vitest";
import { ACTIVE_KEPT, type ActiveChannels, MARK_TTL_MS } from "../../src/active-channels/active-channels";
import { uniq } from "../support/helpers";

function ownRegistry(): DurableObjectStub<ActiveChannels> {
  return env.ACTIVE_CHANNELS.get(env.ACTIVE_CHANNELS.idFromName(uniq("registry")));
}

describe("the sampler's registry", () => {
  it(`keeps at most ${ACTIVE_KEPT} marks: a flood of light new names never pushes out a busy channel`, async () => {
    const registry = ownRegistry();
    const busy = `public:${uniq("busy")}`;
    const now = Date.now();
    const left = await runInDurableObject(registry, (instance) => {
      instance.markActive(busy, 4, now); // 1,000+ messages this period
      for (let i = 0; i < ACTIVE_KEPT + 500; i++) instance.markActive(`public:flood${i}`, 1, now);
      return instance.snapshot().active;
    });
    expect(left.length).toBeLessThanOrEqual(ACTIVE_KEPT + 100);
    expect(left.length).toBeGreaterThanOrEqual(ACTIVE_KEPT);
    expect(left).toContain(busy);
    // The oldest light marks are kept (a run visits them first among equals); newer ones went.
    expect(left).toContain("public:flood0");
    const kept = new Set(left);
    const gone = Array.from({ length: ACTIVE_KEPT + 500 }, (_, i) => `public:flood${i}`).filter((c) => !kept.has(c));
    expect(gone.length).toBeGreaterThanOrEqual(400);
    expect(gone.every((c) => Number(c.slice("public:flood".length)) >= ACTIVE_KEPT - 1)).toBe(true); // the busy mark holds one slot
  });

  it("a run visits at most its cap, heaviest first, and says how many wait", async () => {
    const registry = ownRegistry();
    const now = Date.now();
    const start = await runInDurableObject(registry, (instance) => {
      for (let i = 0; i < 300; i++) instance.markActive(`public:c${i}`, i === 150 ? 3 : 1, now);
      return instance.beginRun(now + 1, 20);
    });
    expect(start.channels).toHaveLength(20);
    expect(start.channels[0]?.channel).toBe("public:c150");
    expect(start.deferred).toBe(280);
  });

  it("forgets a mark no run visited within the mark lifetime", async () => {
    const registry = ownRegistry();
    const now = Date.now();
    const { before, after } = await runInDurableObject(registry, (instance) => {
      instance.markActive("public:stale", 2, now - MARK_TTL_MS - 1);
      instance.markActive("public:fresh", 1, now);
      const before = instance.snapshot().active;
      const run = instance.beginRun(now, 100);
      return { before, after: run.channels.map((c) => c.channel) };
    });
    expect(before).toEqual(["public:fresh", "public:stale"]);
    expect(after).toEqual(["public:fresh"]);
  });

  it("visits throttled channels least recently visited first, so each is released in turn", async () => {
    const registry = ownRegistry();
    const now = Date.now();
    const runs = await runInDurableObject(registry, (instance) => {
      const names = Array.from({ length: 6 }, (_, i) => `public:th${i}`);
      instance.finishRun(
        names.map((channel) => ({ channel, generation: 0, throttled: true })),
        now,
      );
      const visited: string[][] = [];
      for (let r = 1; r <= 3; r++) {
        const run = instance.beginRun(now + r * 60_000, 2);
        visited.push(run.channels.map((c) => c.channel));
        instance.finishRun(
          run.channels.map((c) => ({ ...c, throttled: true })),
          now + r * 60_000,
        );
      }
      return visited;
    });
    expect(new Set(runs.flat()).size).toBe(6);
  });
});
