/**
 * How big a subscriber summary can be (src/wire/frame-text.ts): a paced replay keeps room for the last
 * one its close sends (docs/api.md, "Each reader's rate"), so the bound must hold for the longest
 * summary there is — the longest numbers, and the most keys, each as long as a key may be and escaped
 * at its longest in JSON — and be close to it, so the room kept is not wasted.
 */
import { describe, expect, it } from "vitest";
import { SUMMARY_MAX_KEY_CHARS, SUMMARY_TOP_KEYS, topKeys } from "../../functions/drop-summary";
import { subscriberSummaryFrame, subscriberSummaryMaxBytes, utf8Length } from "../../src/wire/frame-text";

const key = `public:${"c".repeat(100)}`;
const latest = 9_999_999_999_999; // epoch ms, the year 2286
const many = 999_999_999_999_999; // counts of 15 digits: the "(other)" sum of them stays exact

describe("a subscriber summary's most bytes", () => {
  it("bounds a summary without keys, the longest numbers included, to the byte", () => {
    const longest = subscriberSummaryFrame(key, latest, latest, Number.MAX_SAFE_INTEGER, null);
    expect(subscriberSummaryMaxBytes(key, false)).toBe(utf8Length(longest));
    expect(utf8Length(subscriberSummaryFrame(key, Date.now(), Date.now(), 3, null))).toBeLessThan(
      subscriberSummaryMaxBytes(key, false),
    );
  });

  it("bounds a summary naming the most keys, each of the longest escaped characters", () => {
    // Control characters and lone surrogates are the longest a character gets in JSON: 6 bytes.
    const longestKeys = ["\u0001", "\ud800", "\u001f"].map((c) => {
      const counts = new Map<string, number>();
      for (let i = 0; i < SUMMARY_TOP_KEYS + 5; i++)
        counts.set(c.repeat(SUMMARY_MAX_KEY_CHARS - 1) + String.fromCharCode(i), many);
      return subscriberSummaryFrame(key, latest, latest, many * (SUMMARY_TOP_KEYS + 5), topKeys(counts));
    });
    const bound = subscriberSummaryMaxBytes(key, true);
    for (const text of longestKeys) {
      expect(Object.keys(JSON.parse(text).by_key)).toHaveLength(SUMMARY_TOP_KEYS + 1); // and "(other)"
      expect(utf8Length(text)).toBeLessThanOrEqual(bound);
      expect(bound - utf8Length(text)).toBeLessThan(200); // (the last character of each key is shorter)
    }
    // Multi-byte characters take at most 3 bytes each: well within.
    const counts = new Map([["é".repeat(SUMMARY_MAX_KEY_CHARS), 1]]);
    expect(utf8Length(subscriberSummaryFrame(key, latest, latest, 1, topKeys(counts)))).toBeLessThan(bound);
  });
});
