/**
 * Rate shorthand, bursts, limit objects and durations (src/settings/limits.ts, src/settings/durations.ts):
 * by example, and property-based (fast-check): nothing thrown but LimitError / DurationError, and every
 * accepted limit round-trips through its canonical wire form.
 */
import fc from "fast-check";
import { describe, expect, it } from "vitest";
import { DurationError, formatDuration, parseDuration } from "../../src/settings/durations";
import { LimitError, limitToJson, normaliseBurst, parseLimit, parseRateShorthand } from "../../src/settings/limits";
import { anyString, onlyThrows, RUNS } from "../support/property-inputs";

describe("rate shorthand", () => {
  it.each([
    ["500/s", 500, 1000],
    ["10/m", 10, 60_000],
    ["3/h", 3, 3_600_000],
    ["10/500ms", 10, 500],
    ["10/1.5s", 10, 1500],
    ["3/2m30s", 3, 150_000],
    ["  7/s  ", 7, 1000],
    ["100/1s", 100, 1000],
    ["1/1h30m", 1, 5_400_000],
  ])("parses %j", (s, rate, perMs) => {
    expect(parseRateShorthand(s)).toEqual({ rate, perMs });
  });

  it.each(["", "   ", "0/s", "0/1m"])("treats %j as disabled", (s) => {
    expect(parseRateShorthand(s)).toBeNull();
  });

  it.each([
    ["abc", /not a rate/],
    ["abc/s", /whole number/],
    ["1.5/s", /whole number/],
    ["/s", /whole number/],
    ["-1/s", /whole number/],
    ["10/wat", /unit/],
    ["10/5", /unit/],
    ["10/0", /unit/],
    ["10/1d", /unit/],
    ["10/", /window is empty/],
    ["10/0s", /positive/],
    ["10/0ms", /positive/],
    ["10/s/s", /unit/],
  ])("rejects %j", (s, why) => {
    expect(() => parseRateShorthand(s)).toThrow(LimitError);
    expect(() => parseRateShorthand(s)).toThrow(why);
  });
});

describe("burst", () => {
  it("defaults to the rate when empty or 0, and is raised to the rate", () => {
    expect(normaliseBurst(50, "")).toBe(50);
    expect(normaliseBurst(50, "0")).toBe(50);
    expect(normaliseBurst(50, undefined)).toBe(50);
    expect(normaliseBurst(50, "10")).toBe(50);
    expect(normaliseBurst(50, "80")).toBe(80);
    expect(normaliseBurst(50, 80)).toBe(80);
  });

  it.each(["abc", "1.5", "-3"])("rejects %j", (b) => {
    expect(() => normaliseBurst(5, b)).toThrow(LimitError);
  });
});

describe("limit objects", () => {
  it("parses shorthand and object forms", () => {
    expect(parseLimit("500/s")).toEqual({ rate: 500, perMs: 1000, burst: 500 });
    expect(parseLimit({ rate: 5, per: "1m", burst: 2 })).toEqual({ rate: 5, perMs: 60_000, burst: 5 });
    expect(parseLimit({ rate: 5, per: "2m30s", burst: 20 })).toEqual({ rate: 5, perMs: 150_000, burst: 20 });
    expect(parseLimit({ rate: 0, per: "1s" })).toBeNull();
  });

  it.each([
    [{ rate: 1.5 }],
    [{ rate: -1 }],
    [{ rate: 5, per: "0s" }],
    [{ rate: 5, per: 5 }],
    [{ rate: 5, x: 1 }],
    [[]],
    [null],
    [7],
  ])("rejects %j", (v) => {
    expect(() => parseLimit(v)).toThrow(LimitError);
  });

  it("writes the wire form with a canonical window", () => {
    expect(limitToJson({ rate: 10, perMs: 60_000, burst: 20 })).toEqual({ rate: 10, per: "1m", burst: 20 });
    expect(limitToJson(null)).toEqual({ rate: 0, per: "0s", burst: 0 });
  });
});

describe("durations", () => {
  it.each([
    [1000, "1s"],
    [60_000, "1m"],
    [90_000, "1m30s"],
    [1500, "1.5s"],
    [500, "500ms"],
    [3_600_000, "1h"],
    [150_000, "2m30s"],
    [3_661_000, "1h1m1s"],
    [0, "0s"],
  ])("formats %d ms as %s", (ms, text) => {
    expect(formatDuration(ms)).toBe(text);
    expect(parseDuration(text)).toBe(ms);
  });

  it("parses days only when allowed", () => {
    expect(parseDuration("7d", { allowDays: true })).toBe(7 * 86_400_000);
    expect(() => parseDuration("7d")).toThrow();
  });

  it("takes 0 alone as zero only where asked (FRAME_DELAY), and no other number without its unit", () => {
    expect(parseDuration("0", { allowBareZero: true })).toBe(0);
    expect(parseDuration(" 0 ", { allowBareZero: true })).toBe(0);
    expect(() => parseDuration("0")).toThrow();
    for (const s of ["00", "0.0", "1", "-0"]) expect(() => parseDuration(s, { allowBareZero: true }), s).toThrow();
  });

  it.each(["", "5", "5x", "s", "1.s", "1m 30s"])("rejects %j", (s) => {
    expect(() => parseDuration(s)).toThrow();
  });
});

describe("rate shorthand and durations", () => {
  it("never throw anything but LimitError / DurationError", () => {
    fc.assert(
      fc.property(anyString, (s) => {
        const r = onlyThrows(() => parseRateShorthand(s), LimitError);
        if (r) {
          expect(Number.isSafeInteger(r.rate) && r.rate > 0).toBe(true);
          expect(r.perMs).toBeGreaterThan(0);
        }
        onlyThrows(() => parseDuration(s), DurationError);
        onlyThrows(() => parseLimit(s), LimitError);
      }),
      RUNS,
    );
  });

  it("round-trip every accepted limit through its canonical wire form", () => {
    fc.assert(
      fc.property(
        fc.integer({ min: 1, max: 1_000_000 }),
        fc.integer({ min: 1, max: 86_400_000 }),
        fc.integer({ min: 0, max: 2_000_000 }),
        (rate, perMs, burst) => {
          const limit = parseLimit({ rate, per: formatDuration(perMs), burst });
          expect(limit).not.toBeNull();
          const json = limitToJson(limit);
          expect(parseLimit(json)).toEqual(limit);
          expect(parseDuration(json.per)).toBe(perMs);
          expect(limit?.burst).toBe(Math.max(rate, burst === 0 ? rate : burst));
        },
      ),
      RUNS,
    );
  });

  it("refuse non-integers, negative rates and unknown units", () => {
    for (const bad of ["1.5/s", "-1/s", "10/", "/s", "10/fortnight", "10/-1s", "1e3/s", "0x10/s", "10/s/s"]) {
      expect(() => parseRateShorthand(bad), bad).toThrow(LimitError);
    }
  });
});
