import { describe, expect, it } from "vitest";
import {
  KeyTally,
  messageKey,
  OTHER_KEY,
  PointerError,
  parsePointer,
  SUMMARY_MAX_KEY_CHARS,
  summaryFrame,
  summaryKey,
  topKeys,
  valueAt,
} from "../../functions/drop-summary";

describe("JSON Pointers for summary keys (RFC 6901)", () => {
  it("parse into reference tokens, with ~1 as / and ~0 as ~", () => {
    expect(parsePointer("")).toEqual([]);
    expect(parsePointer("/emoji")).toEqual(["emoji"]);
    expect(parsePointer("/a~1b/m~0n/0")).toEqual(["a/b", "m~n", "0"]);
    expect(parsePointer("/~01")).toEqual(["~1"]);
    expect(parsePointer("/")).toEqual([""]);
  });

  it("refuse what is not a pointer", () => {
    for (const bad of ["emoji", "#/emoji", "/a~2", "/a~", "~0"]) {
      expect(() => parsePointer(bad), bad).toThrow(PointerError);
    }
  });

  it("evaluate into objects and arrays, and find nothing where there is nothing", () => {
    const doc = { a: { "b/c": [10, { d: "x" }] }, "": 1 };
    expect(valueAt(doc, parsePointer("/a/b~1c/1/d"))).toBe("x");
    expect(valueAt(doc, parsePointer("/a/b~1c/0"))).toBe(10);
    expect(valueAt(doc, parsePointer("/"))).toBe(1);
    expect(valueAt(doc, [])).toBe(doc);
    expect(valueAt(doc, parsePointer("/a/b~1c/01"))).toBeUndefined();
    expect(valueAt(doc, parsePointer("/a/b~1c/-"))).toBeUndefined();
    expect(valueAt(doc, parsePointer("/a/b~1c/5"))).toBeUndefined();
    expect(valueAt(doc, parsePointer("/missing/x"))).toBeUndefined();
    expect(valueAt("text", parsePointer("/length"))).toBeUndefined();
    expect(valueAt({}, parsePointer("/toString"))).toBeUndefined();
  });
});

describe("summary keys", () => {
  it("a string as it is, a number or boolean as its JSON text, anything else under (other)", () => {
    expect(summaryKey("🔥")).toBe("🔥");
    expect(summaryKey(3)).toBe("3");
    expect(summaryKey(1.5)).toBe("1.5");
    expect(summaryKey(true)).toBe("true");
    expect(summaryKey("")).toBe("");
    for (const v of [null, undefined, {}, [], [1], { a: 1 }]) expect(summaryKey(v)).toBe(OTHER_KEY);
  });

  it("a string longer than the bound counts under (other)", () => {
    expect(summaryKey("x".repeat(SUMMARY_MAX_KEY_CHARS))).toBe("x".repeat(SUMMARY_MAX_KEY_CHARS));
    expect(summaryKey("x".repeat(SUMMARY_MAX_KEY_CHARS + 1))).toBe(OTHER_KEY);
  });

  it("of a message under a pointer", () => {
    expect(messageKey({ emoji: "🔥" }, ["emoji"])).toBe("🔥");
    expect(messageKey({ emoji: { name: "fire" } }, ["emoji"])).toBe(OTHER_KEY);
    expect(messageKey([1, 2], ["emoji"])).toBe(OTHER_KEY);
  });
});

describe("key tallies", () => {
  it("fold keys past the bound into (other), so the total stays exact", () => {
    const t = new KeyTally(3);
    for (const k of ["a", "b", "c", "d", "e", "a"]) t.add(k);
    t.add(OTHER_KEY, 2);
    expect(t.total).toBe(8);
    expect(Object.fromEntries(t.counts)).toEqual({ a: 2, b: 1, c: 1, [OTHER_KEY]: 4 });
    const sum = [...t.counts.values()].reduce((a, b) => a + b, 0);
    expect(sum).toBe(t.total);
  });

  it("(other) does not take one of the bounded places", () => {
    const t = new KeyTally(2);
    t.add(OTHER_KEY);
    t.add("a");
    t.add("b");
    t.add("c");
    expect(Object.fromEntries(t.counts)).toEqual({ [OTHER_KEY]: 2, a: 1, b: 1 });
  });

  it("merge another tally's counts", () => {
    const t = new KeyTally();
    t.addAll({ a: 2, b: 3 });
    t.addAll({ a: 1, [OTHER_KEY]: 4 });
    expect(t.total).toBe(10);
    expect(t.toObject()).toEqual({ a: 3, b: 3, [OTHER_KEY]: 4 });
  });
});

describe("a summary's by_key", () => {
  it("names the 20 largest keys, largest first, and folds the rest into (other)", () => {
    const counts = new Map<string, number>();
    for (let i = 0; i < 30; i++) counts.set(`k${String(i).padStart(2, "0")}`, i + 1);
    counts.set(OTHER_KEY, 5);
    const by = topKeys(counts);
    const keys = Object.keys(by);
    expect(keys).toHaveLength(21);
    expect(keys[0]).toBe("k29");
    expect(keys[19]).toBe("k10");
    // k00..k09 count 1..10 = 55, plus (other)'s own 5
    expect(by[OTHER_KEY]).toBe(60);
    expect(Object.values(by).reduce((a, b) => a + b, 0)).toBe(5 + (30 * 31) / 2);
  });

  it("breaks ties by the key's byte order, and leaves (other) out when nothing is in it", () => {
    const by = topKeys(
      new Map([
        ["b", 2],
        ["a", 2],
        ["c", 3],
      ]),
      2,
    );
    expect(by).toEqual({ c: 3, a: 2, [OTHER_KEY]: 2 });
    expect(Object.keys(topKeys(new Map([["a", 1]])))).toEqual(["a"]);
  });

  it("keeps keys an object would take for its own, so the counts still add up", () => {
    const t = new KeyTally();
    for (const k of ["__proto__", "constructor", "toString", "hasOwnProperty"]) t.add(k, 2);
    t.addAll(JSON.parse('{"__proto__":1}') as Record<string, number>);
    const by = topKeys(t.counts);
    expect(Object.keys(by)).toEqual(["__proto__", "constructor", "hasOwnProperty", "toString"]);
    expect(Object.values(by).reduce((a, b) => a + b, 0)).toBe(t.total);
    expect(JSON.parse(summaryFrame("public:live.emoji", 0, 1, t)).by_key).toEqual(
      JSON.parse('{"__proto__":3,"constructor":2,"hasOwnProperty":2,"toString":2}'),
    );
  });

  it("is carried by a summary frame with its interval and total", () => {
    const t = new KeyTally();
    t.add("🔥", 3);
    t.add(OTHER_KEY);
    expect(JSON.parse(summaryFrame("public:live.emoji", 1000, 2000, t))).toEqual({
      type: "summary",
      channel: "public:live.emoji",
      from: 1000,
      to: 2000,
      dropped: 4,
      by_key: { "🔥": 3, [OTHER_KEY]: 1 },
    });
  });
});
