import fc from "fast-check";
import { describe, expect, it } from "vitest";
import { mergeShardCounts } from "../../functions/shard-counts";

describe("a sharded Pusher channel's counts, merged from its objects'", () => {
  it("adds up subscriptions; a member listed by two shards counts once and is shown once", () => {
    const merged = mergeShardCounts(
      [
        { subscriptions: 0, members: 0, ids: [] },
        { subscriptions: 2, members: 2, ids: ["ann", "bob"] },
        { subscriptions: 3, members: 2, ids: ["ann", "cy"] },
      ],
      1000,
    );
    expect(merged).toEqual({ subscriptions: 5, members: 3, ids: ["ann", "bob", "cy"] });
  });

  it("shows at most `limit` ids, still counting every member", () => {
    const ids = (p: string, n: number) => Array.from({ length: n }, (_, i) => `${p}${i}`);
    const merged = mergeShardCounts(
      [
        { subscriptions: 700, members: 700, ids: ids("a", 700) },
        { subscriptions: 700, members: 700, ids: ids("b", 700) },
      ],
      1000,
    );
    expect(merged.members).toBe(1400);
    expect(merged.ids).toHaveLength(1000);
    expect(new Set(merged.ids).size).toBe(1000);
  });

  it("members a shard did not list are added up uncompared", () => {
    // 5 members, 2 listed: the 3 others count; the listed "ann" is also the other shard's.
    const merged = mergeShardCounts(
      [
        { subscriptions: 5, members: 5, ids: ["ann", "bob"] },
        { subscriptions: 1, members: 1, ids: ["ann"] },
      ],
      0,
    );
    expect(merged).toEqual({ subscriptions: 6, members: 5, ids: [] });
  });

  it("when every shard lists all its members, members is the size of their union", () => {
    fc.assert(
      fc.property(fc.array(fc.uniqueArray(fc.constantFrom("a", "b", "c", "d", "e", "f"))), (sets) => {
        const parts = sets.map((ids) => ({ subscriptions: ids.length, members: ids.length, ids }));
        const merged = mergeShardCounts(parts, 1000);
        expect(merged.members).toBe(new Set(sets.flat()).size);
        expect(merged.subscriptions).toBe(sets.flat().length);
      }),
    );
  });
});
