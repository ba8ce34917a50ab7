import fc from "fast-check";
import { describe, expect, it } from "vitest";
import { BoundedMap } from "../../functions/bounded-map";

const keysOf = (m: BoundedMap<string, number>, candidates: string[]) => candidates.filter((k) => m.has(k));

describe("bounded map", () => {
  it("never holds more than its cap: at the cap the least recently set entry goes, the rest stay", () => {
    const m = new BoundedMap<string, number>(3);
    for (const [i, k] of ["a", "b", "c", "d"].entries()) m.set(k, i);
    expect(m.size).toBe(3);
    expect(keysOf(m, ["a", "b", "c", "d"])).toEqual(["b", "c", "d"]);
    expect(m.get("d")).toBe(3);
  });

  it("with a byte bound, the least recently used entries go until a new one fits; one larger than the budget is not kept", () => {
    const m = new BoundedMap<string, string>(100, { max: 10, of: (_k, v) => v.length });
    m.set("a", "xxxx").set("b", "xxxx");
    expect(m.byteSize).toBe(8);
    m.get("a");
    m.set("c", "xxxxx"); // 13 > 10: b (the coldest) goes
    expect(["a", "b", "c"].filter((k) => m.has(k))).toEqual(["a", "c"]);
    expect(m.byteSize).toBe(9);
    m.set("a", "x"); // overwritten: its old bytes are given back
    expect(m.byteSize).toBe(6);
    m.set("huge", "x".repeat(11));
    expect(m.has("huge")).toBe(false);
    expect(m.byteSize).toBe(6);
    m.delete("c");
    expect(m.byteSize).toBe(1);
    m.clear();
    expect(m.byteSize).toBe(0);
  });

  it("a read counts as a use: the entry read last outlives colder ones", () => {
    const m = new BoundedMap<string, number>(3);
    m.set("a", 1).set("b", 2).set("c", 3);
    expect(m.get("a")).toBe(1);
    m.set("d", 4);
    expect(keysOf(m, ["a", "b", "c", "d"])).toEqual(["a", "c", "d"]);
  });

  it("peek reads without counting as a use", () => {
    const m = new BoundedMap<string, number>(2);
    m.set("a", 1).set("b", 2);
    expect(m.peek("a")).toBe(1);
    m.set("c", 3);
    expect(keysOf(m, ["a", "b", "c"])).toEqual(["b", "c"]);
  });

  it("overwriting a key neither grows the map nor evicts another entry", () => {
    const m = new BoundedMap<string, number>(2);
    m.set("a", 1).set("b", 2).set("a", 10);
    expect(m.size).toBe(2);
    expect(m.get("a")).toBe(10);
    m.set("c", 3); // b is now the coldest
    expect(keysOf(m, ["a", "b", "c"])).toEqual(["a", "c"]);
  });

  it("getOrSet makes a value once and then returns the stored one", () => {
    const m = new BoundedMap<string, number[]>(2);
    let made = 0;
    const make = () => {
      made++;
      return [made];
    };
    const first = m.getOrSet("a", make);
    expect(m.getOrSet("a", make)).toBe(first);
    expect(made).toBe(1);
  });

  it("keeps a stored undefined value distinct from a missing key", () => {
    const m = new BoundedMap<string, number | undefined>(2);
    m.set("a", undefined).set("b", 2);
    m.get("a"); // a use: b is now the coldest
    m.set("c", 3);
    expect(m.has("a")).toBe(true);
    expect(m.has("b")).toBe(false);
  });

  it("delete and clear forget entries", () => {
    const m = new BoundedMap<string, number>(3);
    m.set("a", 1).set("b", 2);
    expect(m.delete("a")).toBe(true);
    expect(m.has("a")).toBe(false);
    m.clear();
    expect(m.size).toBe(0);
  });

  it("refuses a cap below one", () => {
    expect(() => new BoundedMap(0)).toThrow(RangeError);
    expect(() => new BoundedMap(1.5)).toThrow(RangeError);
  });

  it("keeps exactly the entries a reference LRU keeps, whatever the operations (property)", () => {
    const op = fc.oneof(
      fc.record({ kind: fc.constant("get" as const), key: fc.integer({ min: 0, max: 6 }) }),
      fc.record({ kind: fc.constant("peek" as const), key: fc.integer({ min: 0, max: 6 }) }),
      fc.record({ kind: fc.constant("set" as const), key: fc.integer({ min: 0, max: 6 }) }),
      fc.record({ kind: fc.constant("delete" as const), key: fc.integer({ min: 0, max: 6 }) }),
    );
    fc.assert(
      fc.property(fc.integer({ min: 1, max: 4 }), fc.array(op, { maxLength: 60 }), (max, ops) => {
        const m = new BoundedMap<number, number>(max);
        // The reference: an array, oldest first.
        let ref: [number, number][] = [];
        ops.forEach((o, n) => {
          const at = ref.findIndex(([k]) => k === o.key);
          if (o.kind === "get") {
            expect(m.get(o.key)).toBe(at >= 0 ? ref[at]?.[1] : undefined);
            if (at >= 0) ref.push(...ref.splice(at, 1));
          } else if (o.kind === "peek") {
            expect(m.peek(o.key)).toBe(at >= 0 ? ref[at]?.[1] : undefined);
          } else if (o.kind === "set") {
            m.set(o.key, n);
            if (at >= 0) ref.splice(at, 1);
            else if (ref.length >= max) ref.shift();
            ref.push([o.key, n]);
          } else {
            m.delete(o.key);
            ref = ref.filter(([k]) => k !== o.key);
          }
          expect(m.size).toBe(ref.length);
        });
        for (const [k, v] of ref) expect(m.peek(k)).toBe(v);
      }),
    );
  });
});
