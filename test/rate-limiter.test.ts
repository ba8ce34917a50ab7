/** The RateLimiter object: strictness under concurrency, durability across eviction, rescaling. */

import { abortAllDurableObjects, evictDurableObject, runInDurableObject } from "cloudflare:test";
import { env } from "cloudflare:workers";
import { describe, expect, it } from "vitest";
import type { Limit } from "../src/rate-limit/limits";
import { uniq } from "./helpers";

const stub = (key: string) => env.RATE_LIMITER.get(env.RATE_LIMITER.idFromName(key));
const slow: Limit = { rate: 50, perMs: 3_600_000, burst: 50 }; // 50 per hour: no refill during a test

describe("RateLimiter object", () => {
  it("200 concurrent charges on one key of burst 50 admit exactly 50", async () => {
    const s = stub(`publish:${uniq()}`);
    const results = await Promise.all(Array.from({ length: 200 }, () => s.charge(slow)));
    expect(results.filter((r) => r.allowed)).toHaveLength(50);
    expect(results.filter((r) => !r.allowed).every((r) => r.remaining === 0 && r.retryAfterMs > 0)).toBe(true);
  });

  it("a denied charge consumes nothing", async () => {
    const s = stub(`publish:${uniq()}`);
    const l: Limit = { rate: 2, perMs: 3_600_000, burst: 2 };
    await s.charge(l);
    await s.charge(l);
    const before = await s.peek();
    for (let i = 0; i < 20; i++) expect((await s.charge(l)).allowed).toBe(false);
    const after = await s.peek();
    expect(after?.tokens).toBeGreaterThanOrEqual(before?.tokens ?? 0);
    expect(after?.tokens).toBeLessThan(0.01);
  });

  it("refill is continuous: half a period later, half the tokens are back", async () => {
    const s = stub(`publish:${uniq()}`);
    const l: Limit = { rate: 10, perMs: 60_000, burst: 10 };
    const t0 = 1_000_000;
    for (let i = 0; i < 10; i++) await s.charge(l, t0);
    // The object's clock is a parameter: half a period later without sleeping.
    const results = [];
    for (let i = 0; i < 8; i++) results.push((await s.charge(l, t0 + 30_000)).allowed);
    expect(results.filter(Boolean)).toHaveLength(5);
    // And the state on disk agrees with what the object decided from memory.
    await runInDurableObject(s, (_i, state) => {
      const row = state.storage.sql.exec<{ tokens: number }>("SELECT tokens FROM bucket").toArray()[0];
      expect(row?.tokens).toBeCloseTo(0, 6);
    });
  });

  it("eviction or an abort mid-window does not refill the bucket", async () => {
    const key = `publish:${uniq()}`;
    const s = stub(key);
    for (let i = 0; i < 50; i++) await s.charge(slow);
    await evictDurableObject(s);
    expect((await s.charge(slow)).allowed).toBe(false);
    await abortAllDurableObjects();
    // The old stub is broken by the abort; a new one reaches the restarted object.
    expect((await stub(key).charge(slow)).allowed).toBe(false);
  });

  it("a changed limit rescales the existing bucket instead of resetting it to full", async () => {
    const s = stub(`publish:${uniq()}`);
    const small: Limit = { rate: 10, perMs: 3_600_000, burst: 10 };
    for (let i = 0; i < 10; i++) await s.charge(small); // empty
    const bigger: Limit = { rate: 100, perMs: 3_600_000, burst: 100 };
    expect((await s.charge(bigger)).allowed).toBe(false);
    const s2 = stub(`publish:${uniq()}`);
    for (let i = 0; i < 5; i++) await s2.charge(small); // half full
    const results = await Promise.all(Array.from({ length: 80 }, () => s2.charge(bigger)));
    expect(results.filter((r) => r.allowed)).toHaveLength(50);
  });

  it("concurrent batch charges on one key of burst 50 grant exactly 50 in total", async () => {
    const s = stub(`publish:${uniq()}`);
    const counts = Array.from({ length: 20 }, (_, i) => 1 + (i % 7));
    const results = await Promise.all(counts.map((n) => s.chargeMany(slow, n)));
    expect(results.reduce((sum, r) => sum + r.granted, 0)).toBe(50);
    results.forEach((r, i) => {
      expect(r.granted).toBeLessThanOrEqual(counts[i] as number);
    });
    expect((await s.charge(slow)).allowed).toBe(false);
  });
});
