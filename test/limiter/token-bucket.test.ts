/** The token bucket with a fake clock. */
import { describe, expect, it } from "vitest";
import { type BucketState, fullBucket, refill, refund, rescale, take, takeMany } from "../../src/limiter/token-bucket";
import type { Limit } from "../../src/settings/limits";
import { seededRandom } from "../support/seeded-random";

const limit: Limit = { rate: 10, perMs: 1000, burst: 10 }; // 10/s, one token per 100 ms

function drain(state: BucketState, l: Limit, now: number, n: number): BucketState {
  let s = state;
  for (let i = 0; i < n; i++) {
    const d = take(s, l, now);
    expect(d.allowed).toBe(true);
    s = d.state;
  }
  return s;
}

describe("token bucket", () => {
  it("admits exactly burst requests at one instant, then denies", () => {
    let s = fullBucket(limit, 0);
    let allowed = 0;
    for (let i = 0; i < 25; i++) {
      const d = take(s, limit, 0);
      s = d.state;
      if (d.allowed) allowed++;
    }
    expect(allowed).toBe(10);
  });

  it("a denied request consumes nothing", () => {
    const empty = drain(fullBucket(limit, 0), limit, 0, 10);
    let s = empty;
    for (let i = 0; i < 100; i++) s = take(s, limit, 50).state;
    // 100 ms after draining exactly one token is back, no matter how many were denied meanwhile.
    expect(take(s, limit, 100).allowed).toBe(true);
    expect(refill(s, limit, 100)).toBeCloseTo(1, 9);
  });

  it("refills continuously: half a period gives half the tokens", () => {
    const empty = drain(fullBucket(limit, 0), limit, 0, 10);
    expect(refill(empty, limit, 500)).toBeCloseTo(5, 9);
    let s = empty;
    let allowed = 0;
    for (let i = 0; i < 10; i++) {
      const d = take(s, limit, 500);
      s = d.state;
      if (d.allowed) allowed++;
    }
    expect(allowed).toBe(5);
  });

  it("never holds more than burst", () => {
    expect(refill({ tokens: 3, updatedAt: 0 }, limit, 1_000_000)).toBe(10);
  });

  it("tokens on lease still count: the bucket refills only up to burst minus what is held", () => {
    expect(refill({ tokens: 3, updatedAt: 0 }, limit, 1_000_000, 4)).toBe(6);
    // Holding more than is left never takes tokens away that are already in the bucket.
    expect(refill({ tokens: 7, updatedAt: 0 }, limit, 1_000_000, 4)).toBe(7);
    const d = takeMany({ tokens: 6, updatedAt: 0 }, limit, 0, 10, 4);
    expect(d.granted).toBe(6);
    expect(d.fullInMs).toBe(600); // back to burst − held = 6 tokens at 100 ms each
  });

  it("a refund puts whole tokens back, refilled first and never past burst (less what is on lease)", () => {
    const drained = drain(fullBucket(limit, 0), limit, 0, 10);
    expect(refund(drained, limit, 0, 1)).toEqual({ tokens: 1, updatedAt: 0 });
    expect(takeMany(refund(drained, limit, 0, 3), limit, 0, 5).granted).toBe(3);
    // 250 ms refilled 2.5 tokens; 3 more make 5.5, not 3 capped again.
    expect(refund(drained, limit, 250, 3).tokens).toBeCloseTo(5.5, 9);
    // Capped at the burst, and at burst − held with tokens on lease.
    expect(refund({ tokens: 9.5, updatedAt: 0 }, limit, 0, 5).tokens).toBe(10);
    expect(refund(fullBucket(limit, 0), limit, 0, 1).tokens).toBe(10);
    expect(refund({ tokens: 5, updatedAt: 0 }, limit, 0, 5, 3).tokens).toBe(7);
    // Nothing to give back for a count that is not a positive whole number.
    for (const n of [0, -2, 1.5, Number.NaN]) expect(refund(drained, limit, 0, n)).toBe(drained);
  });

  it("tells exactly when the next token is back, and when the bucket is full", () => {
    const empty = drain(fullBucket(limit, 0), limit, 0, 10);
    const d = take(empty, limit, 30);
    expect(d.allowed).toBe(false);
    expect(d.retryAfterMs).toBe(70);
    expect(d.fullInMs).toBe(970);
    const ok = take(fullBucket(limit, 0), limit, 0);
    expect(ok).toMatchObject({ allowed: true, remaining: 9, retryAfterMs: 0, fullInMs: 100 });
  });

  it("a clock that steps back refills nothing", () => {
    const s = drain(fullBucket(limit, 1000), limit, 1000, 10);
    expect(take(s, limit, 0).allowed).toBe(false);
  });

  it("rescales on a config change, keeping the fill fraction instead of refilling", () => {
    const half = drain(fullBucket(limit, 0), limit, 0, 5); // 5 of 10
    const bigger: Limit = { rate: 100, perMs: 1000, burst: 100 };
    expect(rescale(half, limit, bigger, 0).tokens).toBeCloseTo(50, 9);
    const smaller: Limit = { rate: 2, perMs: 1000, burst: 2 };
    expect(rescale(half, limit, smaller, 0).tokens).toBeCloseTo(1, 9);
  });

  it("works for long windows (3 per 2m30s)", () => {
    const l: Limit = { rate: 3, perMs: 150_000, burst: 3 };
    const s = drain(fullBucket(l, 0), l, 0, 3);
    const d = take(s, l, 1000);
    expect(d.allowed).toBe(false);
    expect(d.retryAfterMs).toBe(49_000);
  });

  it("deciding n requests at once is exactly n single decisions in a row", () => {
    const random = seededRandom(7);
    for (let trial = 0; trial < 500; trial++) {
      const l: Limit = {
        rate: 1 + Math.floor(random() * 20),
        perMs: 100 + Math.floor(random() * 5000),
        burst: 1 + Math.floor(random() * 30),
      };
      let state: BucketState = { tokens: random() * l.burst, updatedAt: 0 };
      const now = Math.floor(random() * 2000);
      const count = 1 + Math.floor(random() * 40);
      const batch = takeMany(state, l, now, count);
      let granted = 0;
      let last = take(state, l, now);
      for (let i = 0; i < count; i++) {
        last = take(state, l, now);
        state = last.state;
        if (last.allowed) granted++;
      }
      expect(batch.granted).toBe(granted);
      expect(batch.state.tokens).toBeCloseTo(state.tokens, 9);
      expect(batch.remaining).toBe(last.remaining);
      expect(batch.retryAfterMs).toBe(last.retryAfterMs);
      expect(batch.fullInMs).toBe(last.fullInMs);
    }
  });
});
