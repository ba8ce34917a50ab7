/** The binary min-heap behind the export's merge and the isolate's lease index (functions/min-heap.ts). */
import fc from "fast-check";
import { describe, expect, it } from "vitest";
import { MinHeap } from "../../functions/min-heap";

describe("a min-heap", () => {
  it("gives back every item pushed, earliest first, whatever the order of pushes and pops", () => {
    fc.assert(
      fc.property(fc.array(fc.option(fc.integer({ min: -50, max: 50 }), { nil: undefined })), (ops) => {
        // A number pushes it, undefined pops: the heap must agree with a sorted list at every step.
        const heap = new MinHeap<number>((a, b) => a < b);
        const sorted: number[] = [];
        for (const op of ops) {
          if (op === undefined) expect(heap.pop()).toBe(sorted.shift());
          else {
            heap.push(op);
            sorted.push(op);
            sorted.sort((a, b) => a - b);
          }
          expect(heap.size).toBe(sorted.length);
          expect(heap.peek()).toBe(sorted[0]);
        }
      }),
    );
  });
});
