/**
 * Inputs for the property-based tests (fast-check) of the parsers and the token decoder: a fixed seed,
 * strings biased towards the grammar's own alphabet, and a check that a parser throws only its own error.
 */
import fc from "fast-check";
import { expect } from "vitest";

export const RUNS = { numRuns: 500, seed: 20261129 };

/** Strings biased towards the grammar's own alphabet, so the parsers see near-misses, not just noise. */
const grammarish = fc.string({
  unit: fc.constantFrom(
    ..."abcz019_-.:*/smhpublicrivate ".split(""),
    "**",
    "public:",
    "private:",
    "pusher:",
    "private-",
    "presence-",
    "A",
    "=",
    "\u0000",
    "é",
    "🔥",
  ),
  maxLength: 60,
});
export const anyString = fc.oneof(
  grammarish,
  fc.string({ maxLength: 300 }),
  fc.string({ unit: "binary", maxLength: 80 }),
);

export function onlyThrows<T>(f: () => T, errorClass: new (...args: never[]) => Error): T | undefined {
  try {
    return f();
  } catch (e) {
    expect(e).toBeInstanceOf(errorClass);
    return undefined;
  }
}

export const component = fc.stringMatching(/^[a-z0-9_-]{1,12}$/);
