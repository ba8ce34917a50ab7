/**
 * The channel's registry of relays (src/channel/relay-registry.ts): the lowest relay with room in the
 * subscriber's group, reserved slots counted until joined or lapsed, MAX_SUBSCRIBERS, leaving, and
 * each client's subscriptions (MAX_SUBSCRIPTIONS_PER_CLIENT) counted from reservations and reports,
 * and what anonymous clients hold: all of them (ANONYMOUS_SHARE) and those of one IPv6 /48.
 */
import { describe, expect, it } from "vitest";
import { clientCounts, RESERVATION_TTL_MS, type RelayEntry, RelayRegistry } from "../../src/channel/relay-registry";

function registry() {
  const stored = new Map<string, RelayEntry>();
  const r = new RelayRegistry(
    { save: (e) => stored.set(e.name, { ...e }), remove: (name) => stored.delete(name) },
    (group, k) => `relay:c:${group}:${k}`,
  );
  return { r, stored };
}

/** Limits with no anonymous bound: MAX_SUBSCRIBERS and the client's cap alone. */
const caps = (maxSubscribers: number, maxPerClient: number) => ({
  maxSubscribers,
  maxPerClient,
  maxAnonymous: Number.POSITIVE_INFINITY,
  maxPerNet: Number.POSITIVE_INFINITY,
});

const slot = (a: ReturnType<RelayRegistry["assign"]>) => {
  if (!("relay" in a)) throw new Error("refused");
  return a;
};

describe("relay registry", () => {
  it("fills the lowest relay of the group first and opens one only when all are full; groups apart", () => {
    const { r } = registry();
    const names = Array.from({ length: 5 }, () => slot(r.assign("lhr", 2, 0, "client", caps(100, 1000))).relay);
    expect(names).toEqual(["relay:c:lhr:0", "relay:c:lhr:0", "relay:c:lhr:1", "relay:c:lhr:1", "relay:c:lhr:2"]);
    expect(slot(r.assign("sin", 2, 0, "client", caps(100, 1000))).relay).toBe("relay:c:sin:0");
  });

  it("a place freed on a lower relay is filled before a higher one's", () => {
    const { r } = registry();
    const [a, b, c] = [0, 1, 2].map(() => slot(r.assign("g", 2, 0, "client", caps(100, 1000))));
    if (!a || !b || !c) throw new Error("no slot");
    r.report(
      {
        relay: a.relay,
        group: "g",
        k: 0,
        websockets: 1,
        sse: 0,
        clients: [],
        joined: [a.reservation, b.reservation],
        slowClosed: 0,
      },
      1,
    );
    r.report(
      { relay: c.relay, group: "g", k: 1, websockets: 1, sse: 0, clients: [], joined: [c.reservation], slowClosed: 0 },
      1,
    );
    expect(slot(r.assign("g", 2, 2, "client", caps(100, 1000))).relay).toBe("relay:c:g:0");
  });

  it("a reservation holds its slot until it joins or lapses", () => {
    const { r } = registry();
    const a = slot(r.assign("g", 1, 0, "client", caps(100, 1000)));
    expect(slot(r.assign("g", 1, 1, "client", caps(100, 1000))).relay).toBe("relay:c:g:1");
    r.report(
      { relay: a.relay, group: "g", k: 0, websockets: 1, sse: 0, clients: [], joined: [a.reservation], slowClosed: 0 },
      2,
    );
    expect(r.totals(2)).toEqual({ websockets: 1, sse: 0, reserved: 1 });
    // The second never arrived: its slot lapses, and its relay, never active, is forgotten.
    r.sweep(1 + RESERVATION_TTL_MS);
    expect(r.totals(1 + RESERVATION_TTL_MS)).toEqual({ websockets: 1, sse: 0, reserved: 0 });
    expect(r.size).toBe(1);
  });

  it("an emptied relay kept for a reserved slot is told when the slot lapses, and leaves when reported then", () => {
    const { r } = registry();
    const a = slot(r.assign("g", 2, 0, "client", caps(100, 1000)));
    const b = slot(r.assign("g", 2, 5, "client", caps(100, 1000)));
    const report = (websockets: number, joined: string[]) => ({
      relay: a.relay,
      group: "g",
      k: 0,
      websockets,
      sse: 0,
      clients: [],
      joined,
      slowClosed: 0,
    });
    expect(r.report(report(1, [a.reservation]), 10)).toEqual({ leave: false, activated: true });
    // Its subscriber left; b's never came. Kept, and told when b's slot lapses.
    expect(r.report(report(0, []), 20)).toEqual({ leave: false, activated: false, askAgainAt: 5 + RESERVATION_TTL_MS });
    expect(r.report(report(0, []), 5 + RESERVATION_TTL_MS)).toEqual({ leave: true, activated: false });
    expect(r.size).toBe(0);
    expect(b.relay).toBe(a.relay);
  });

  it("answers full at maxSubscribers, counting reserved slots", () => {
    const { r } = registry();
    slot(r.assign("g", 10, 0, "client", caps(2, 1000)));
    slot(r.assign("g", 10, 0, "client", caps(2, 1000)));
    expect(r.assign("g", 10, 0, "client", caps(2, 1000))).toEqual({ full: true });
  });

  it("a relay is active (stored, sent messages) from its first report, and leaves when empty with nothing reserved", () => {
    const { r, stored } = registry();
    const a = slot(r.assign("g", 10, 0, "client", caps(100, 1000)));
    expect(r.active()).toEqual([]);
    const first = r.report(
      { relay: a.relay, group: "g", k: 0, websockets: 1, sse: 0, clients: [], joined: [a.reservation], slowClosed: 0 },
      1,
    );
    expect(first).toEqual({ leave: false, activated: true });
    expect(r.active().map((e) => e.name)).toEqual([a.relay]);
    expect([...stored.keys()]).toEqual([a.relay]);
    const b = slot(r.assign("g", 10, 2, "client", caps(100, 1000)));
    // Empty, but a subscriber is on its way: it stays.
    expect(
      r.report({ relay: a.relay, group: "g", k: 0, websockets: 0, sse: 0, clients: [], joined: [], slowClosed: 0 }, 3),
    ).toEqual({
      leave: false,
      activated: false,
      askAgainAt: 2 + RESERVATION_TTL_MS,
    });
    expect(
      r.report(
        {
          relay: b.relay,
          group: "g",
          k: 0,
          websockets: 0,
          sse: 0,
          clients: [],
          joined: [b.reservation],
          slowClosed: 0,
        },
        4,
      ),
    ).toEqual({
      leave: true,
      activated: false,
    });
    expect(r.size).toBe(0);
    expect(stored.size).toBe(0);
  });

  it("a client's subscriptions are its reserved slots plus what its relays report; a report of a close frees one", () => {
    const { r } = registry();
    const a = slot(r.assign("g", 2, 0, "sub:a", caps(100, 3)));
    const b = slot(r.assign("g", 2, 0, "sub:a", caps(100, 3)));
    const c = slot(r.assign("h", 2, 0, "sub:a", caps(100, 3)));
    expect(r.assign("g", 2, 0, "sub:a", caps(100, 3))).toEqual({ clientFull: true });
    // Another client is not affected.
    slot(r.assign("g", 2, 0, "sub:b", caps(100, 3)));
    // Joined: the relays' counts take over from the reservations, across relays and groups.
    r.report(
      {
        relay: a.relay,
        group: "g",
        k: 0,
        websockets: 2,
        sse: 0,
        clients: [["sub:a", 2]],
        joined: [a.reservation, b.reservation],
        slowClosed: 0,
      },
      1,
    );
    r.report(
      {
        relay: c.relay,
        group: "h",
        k: 0,
        websockets: 1,
        sse: 0,
        clients: [["sub:a", 1]],
        joined: [c.reservation],
        slowClosed: 0,
      },
      1,
    );
    expect(r.held("sub:a", 1)).toBe(3);
    expect(r.assign("g", 2, 1, "sub:a", caps(100, 3))).toEqual({ clientFull: true });
    // One closes: the relay's next report frees its slot.
    r.report(
      { relay: a.relay, group: "g", k: 0, websockets: 1, sse: 0, clients: [["sub:a", 1]], joined: [], slowClosed: 0 },
      2,
    );
    expect(r.held("sub:a", 2)).toBe(2);
    slot(r.assign("g", 2, 2, "sub:a", caps(100, 3)));
    // A reservation that never joined lapses and stops counting.
    expect(r.held("sub:a", 2 + RESERVATION_TTL_MS)).toBe(2);
  });

  it("a relay's per-client counts are bounded by the subscribers it reports, and malformed pairs skipped", () => {
    const many = Array.from({ length: 50 }, (_, i): [string, number] => [`ip:${i}`, 1]);
    expect(clientCounts(many, 10).size).toBe(10);
    expect([...clientCounts([["sub:x", 500]], 3)]).toEqual([["sub:x", 3]]);
    expect([...clientCounts([["a", 0], ["b", 1.5], [7, 1], "x", ["c", 2]], 5)]).toEqual([["c", 2]]);
    expect(clientCounts("not pairs", 5).size).toBe(0);
  });

  it("anonymous clients hold at most maxAnonymous, reports and reservations together; token holders still get in", () => {
    const { r } = registry();
    const limits = { maxSubscribers: 6, maxPerClient: 20, maxAnonymous: 3, maxPerNet: 100 };
    const a = slot(r.assign("g", 10, 0, "ip:192.0.2.1", limits));
    slot(r.assign("g", 10, 0, "ip:192.0.2.2", limits));
    r.report(
      {
        relay: a.relay,
        group: "g",
        k: 0,
        websockets: 2,
        sse: 0,
        clients: [
          ["ip:192.0.2.1", 1],
          ["sub:x", 1],
        ],
        joined: [a.reservation],
        slowClosed: 0,
      },
      1,
    );
    // One reported, one reserved: a third anonymous one fits, a fourth does not.
    slot(r.assign("g", 10, 1, "ip:192.0.2.3", limits));
    expect(r.assign("g", 10, 1, "ip:192.0.2.4", limits)).toEqual({ anonymousFull: true });
    // A subject is not anonymous: it gets in up to MAX_SUBSCRIBERS.
    slot(r.assign("g", 10, 1, "sub:y", limits));
    slot(r.assign("g", 10, 1, "user:z", limits));
    expect(r.assign("g", 10, 1, "sub:w", limits)).toEqual({ full: true });
  });

  it("anonymous clients of one IPv6 /48 hold at most maxPerNet together; the next /48 and IPv4 are apart", () => {
    const { r } = registry();
    const limits = { maxSubscribers: 100, maxPerClient: 2, maxAnonymous: 100, maxPerNet: 3 };
    const first = slot(r.assign("g", 10, 0, "ip:2001:db8:7:1::/64", limits));
    r.report(
      {
        relay: first.relay,
        group: "g",
        k: 0,
        websockets: 2,
        sse: 0,
        clients: [
          ["ip:2001:db8:7:1::/64", 1],
          ["ip:2001:db8:7:2::/64", 1],
        ],
        joined: [first.reservation],
        slowClosed: 0,
      },
      1,
    );
    slot(r.assign("g", 10, 1, "ip:2001:db8:7:3::/64", limits));
    expect(r.assign("g", 10, 1, "ip:2001:db8:7:4::/64", limits)).toEqual({ netFull: true });
    slot(r.assign("g", 10, 1, "ip:2001:db8:8:1::/64", limits));
    slot(r.assign("g", 10, 1, "ip:192.0.2.9", limits));
    // A subject is never counted by address.
    slot(r.assign("g", 10, 1, "sub:2001:db8:7:5::/64", limits));
  });
});
