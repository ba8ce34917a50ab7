/**
 * The export's order with constant memory (docs/api.md, "Export"): the lines of many record objects,
 * each already in `dropped_at` order, merged into one stream in `dropped_at` order (then `id`).
 *
 * Sources come in the order of the earliest drop they may hold (`first`: an object's key starts with
 * the earliest drop of its batch, functions/record-batch.ts `batchId`, so listing an hour yields them
 * in that order). A source is opened only once the merge reaches its `first`, so what is open at any
 * moment is the objects whose drop times overlap that moment — one per isolate batch in flight then,
 * whatever the hour holds — each holding one line and one read chunk. Platform-neutral: the caller
 * supplies the sources and their readers.
 */
import { MinHeap } from "./min-heap";

/** One line of the record with what orders it. */
export interface TimedLine {
  text: string;
  dropped_at: number;
  id: string;
}

/** An object to merge: the earliest drop it may hold, and how to read its lines (in drop order). */
export interface MergeSource {
  first: number;
  open(): AsyncIterator<TimedLine>;
}

/** More sources overlapped in drop time than the merge may hold open at once. */
export class TooManyOpen extends Error {
  constructor(readonly limit: number) {
    super(`more than ${limit} record objects overlap in drop time`);
  }
}

const before = (a: TimedLine, b: TimedLine): boolean =>
  a.dropped_at < b.dropped_at || (a.dropped_at === b.dropped_at && a.id < b.id);

interface Head {
  line: TimedLine;
  rest: AsyncIterator<TimedLine>;
}

/**
 * Every line of every source, once, in (`dropped_at`, `id`) order, given sources in `first` order
 * whose lines are each in that order and no earlier than their `first`.
 * @throws TooManyOpen when more than `maxOpen` sources would be open at once
 */
export async function* mergeByDropTime(
  sources: AsyncIterable<MergeSource>,
  maxOpen: number,
): AsyncGenerator<TimedLine, void, undefined> {
  const heads = new MinHeap<Head>((a, b) => before(a.line, b.line));
  const pending = sources[Symbol.asyncIterator]();
  let next = await pending.next();
  for (;;) {
    // Open every source that may hold a line at or before the earliest line open now.
    while (!next.done && (heads.size === 0 || next.value.first <= (heads.peek() as Head).line.dropped_at)) {
      const rest = next.value.open();
      const first = await rest.next();
      if (!first.done) {
        if (heads.size >= maxOpen) throw new TooManyOpen(maxOpen);
        heads.push({ line: first.value, rest });
      }
      next = await pending.next();
    }
    const top = heads.pop();
    if (!top) return;
    yield top.line;
    const after = await top.rest.next();
    if (!after.done) heads.push({ line: after.value, rest: top.rest });
  }
}
