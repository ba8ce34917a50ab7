/**
 * A binary min-heap: the earliest item by `before` first, O(log n) to push or pop. Used where a
 * scan of everything held would grow with it: the export's merge of record objects
 * (functions/record-merge.ts) and the leases an isolate holds, by when each stops being spent
 * (src/limiter/isolate-leases.ts).
 */
export class MinHeap<T> {
  private readonly items: T[] = [];

  /** `before(a, b)`: a comes out first. */
  constructor(private readonly before: (a: T, b: T) => boolean) {}

  get size(): number {
    return this.items.length;
  }

  peek(): T | undefined {
    return this.items[0];
  }

  push(item: T): void {
    const a = this.items;
    a.push(item);
    let i = a.length - 1;
    while (i > 0) {
      const p = (i - 1) >> 1;
      if (!this.before(a[i] as T, a[p] as T)) break;
      [a[i], a[p]] = [a[p] as T, a[i] as T];
      i = p;
    }
  }

  pop(): T | undefined {
    const a = this.items;
    const top = a[0];
    const last = a.pop();
    if (a.length > 0 && last !== undefined) {
      a[0] = last;
      let i = 0;
      for (;;) {
        const l = 2 * i + 1;
        const r = l + 1;
        let m = i;
        if (l < a.length && this.before(a[l] as T, a[m] as T)) m = l;
        if (r < a.length && this.before(a[r] as T, a[m] as T)) m = r;
        if (m === i) break;
        [a[i], a[m]] = [a[m] as T, a[i] as T];
        i = m;
      }
    }
    return top;
  }
}
