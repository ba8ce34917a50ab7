/**
 * Channel names and patterns (src/wire/channel-names.ts): the grammar by example, matching, scores and
 * rule selection; and, property-based (fast-check), that the parsers throw nothing but GrammarError,
 * never accept what the grammar forbids, and round-trip what they accept.
 */
import fc from "fast-check";
import { describe, expect, it } from "vitest";
import {
  compileRules,
  GrammarError,
  isChannelName,
  MAX_CHANNEL_LENGTH,
  MAX_COMPONENT_LENGTH,
  matchesPattern,
  parseChannelName,
  parsePattern,
  selectRule,
} from "../../src/wire/channel-names";
import { anyString, component, onlyThrows, RUNS } from "../support/property-inputs";

const name = (s: string) => parseChannelName(s);

describe("channel names", () => {
  it.each([
    "public:live.reactions",
    "public:a.b.c",
    "public:a.b.c.d",
    "private:team.alpha.chat",
    "private:webapp.user.42.downloads",
    "public:a_b.c-d",
    "public:0.9",
  ])("accepts %s", (s) => {
    const n = name(s);
    expect(n.name).toBe(s);
    expect(`${n.prefix}:${n.components.join(".")}`).toBe(s);
    expect(n.visibility).toBe(n.prefix);
  });

  it.each([
    ["", "empty"],
    ["public:", "no components"],
    ["public:live", "one component"],
    ["public:a.b.c.d.e", "five components"],
    ["private:webapp.session", "private with two components"],
    ["secret:webapp.x.y", "unknown visibility"],
    ["Public:a.b", "visibility case"],
    ["public:webapp:session.a", "second colon"],
    ["public:Webapp.system.x", "upper case"],
    ["public:web app.sys.x", "space"],
    ["public:webapp..x", "empty component"],
    ["public:a.b.", "trailing dot"],
    ["public:.a.b", "leading dot"],
    ["public:a.*", "wildcard in a name"],
    ["public:a/b.c", "slash"],
    ["public:../etc.passwd", "path traversal"],
    ["public:é.b", "non-ASCII"],
    ["live.reactions", "no visibility"],
    [`public:${"a".repeat(65)}.b`, "component over 64"],
    [`public:${"a".repeat(64)}.${"b".repeat(64)}.${"c".repeat(64)}.${"d".repeat(5)}`, "name over 200"],
  ])("rejects %j (%s)", (s) => {
    expect(() => name(s)).toThrow(GrammarError);
    expect(isChannelName(s)).toBe(false);
  });

  it("accepts a name of exactly 200 characters and components of 64", () => {
    const s = `public:${"a".repeat(64)}.${"b".repeat(64)}.${"c".repeat(63)}`;
    expect(s.length).toBe(200);
    expect(isChannelName(s)).toBe(true);
  });

  it("never throw anything but GrammarError, and accept only what the grammar allows", () => {
    fc.assert(
      fc.property(anyString, (s) => {
        const name = onlyThrows(() => parseChannelName(s), GrammarError);
        if (!name) return;
        expect(name.name).toBe(s);
        expect(s.length).toBeLessThanOrEqual(MAX_CHANNEL_LENGTH);
        if (name.prefix === "pusher") {
          expect(s).toMatch(/^pusher:[A-Za-z0-9_\-=@,.;]{1,164}$/);
          expect(s.startsWith("pusher:private-encrypted-")).toBe(false);
          expect(name.visibility).toBe(/^pusher:(private|presence)-/.test(s) ? "private" : "public");
          return;
        }
        expect(s).toMatch(/^(public|private):[a-z0-9_-]+(\.[a-z0-9_-]+){1,3}$/);
        expect(name.components.every((c) => c.length <= MAX_COMPONENT_LENGTH)).toBe(true);
        if (name.visibility === "private") expect(name.components.length).toBeGreaterThanOrEqual(3);
      }),
      RUNS,
    );
  });

  it("accept every well-formed name and round-trip it", () => {
    fc.assert(
      fc.property(
        fc.constantFrom("public", "private"),
        fc.array(component, { minLength: 3, maxLength: 4 }),
        (v, cs) => {
          const text = `${v}:${cs.join(".")}`;
          const name = parseChannelName(text);
          expect(name.name).toBe(text);
          expect(`${name.prefix}:${name.components.join(".")}`).toBe(text);
        },
      ),
      RUNS,
    );
  });

  it("refuse path traversal, separators, upper case and control characters", () => {
    for (const bad of [
      "public:../../etc.passwd",
      "public:a..b",
      "public:a/b.c",
      "public:a.%2e%2e",
      "public:A.b",
      "public:a.b\u0000",
      "public:a.b\n",
      "public: a.b",
      "public:a.b.c.d.e",
      `public:${"a".repeat(65)}.b`,
      "Public:a.b",
      "*:a.b",
    ]) {
      expect(() => parseChannelName(bad), bad).toThrow(GrammarError);
    }
  });
});

describe("Pusher channel names (pusher:N)", () => {
  it.each([
    ["pusher:chat", "public", ["chat"]],
    ["pusher:private-room.1", "private", ["private-room", "1"]],
    ["pusher:presence-stadium.main", "private", ["presence-stadium", "main"]],
    ["pusher:Mixed_Case-=@,;", "public", ["Mixed_Case-=@,;"]],
    ["pusher:a..b", "public", ["a", "", "b"]],
    [`pusher:${"x".repeat(164)}`, "public", ["x".repeat(164)]],
  ])("accepts %s (%s)", (s, visibility, components) => {
    const n = name(s);
    expect(n.prefix).toBe("pusher");
    expect(n.visibility).toBe(visibility);
    expect(n.components).toEqual(components);
  });

  it.each([
    ["pusher:", "empty"],
    [`pusher:${"x".repeat(165)}`, "over 164"],
    ["pusher:a b", "space"],
    ["pusher:a:b", "colon"],
    ["pusher:a#b", "hash (the shard separator)"],
    ["pusher:é", "non-ASCII"],
    ["pusher:private-encrypted-x", "encrypted channels are not supported"],
    ["Pusher:x", "prefix case"],
  ])("rejects %j (%s)", (s) => {
    expect(() => name(s)).toThrow(GrammarError);
  });

  it("splits into components on dots for patterns; * is one component, ** the rest", () => {
    const main = name("pusher:presence-stadium.main");
    expect(matchesPattern(parsePattern("pusher:presence-stadium.*"), main)).toBe(true);
    expect(matchesPattern(parsePattern("pusher:presence-stadium.**"), main)).toBe(true);
    expect(matchesPattern(parsePattern("pusher:**"), main)).toBe(true);
    expect(matchesPattern(parsePattern("pusher:*"), main)).toBe(false);
    expect(matchesPattern(parsePattern("pusher:presence-stadium.main"), main)).toBe(true);
    expect(matchesPattern(parsePattern("pusher:Presence-stadium.*"), main)).toBe(false);
    // Prefixes never cross: a public: or private: pattern never matches a pusher: name.
    expect(matchesPattern(parsePattern("public:**"), main)).toBe(false);
    expect(matchesPattern(parsePattern("private:**"), main)).toBe(false);
    expect(matchesPattern(parsePattern("pusher:**"), name("public:a.b"))).toBe(false);
  });

  it("scores pusher: patterns like the others", () => {
    expect(parsePattern("pusher:presence-stadium.*").score).toBe(9);
    expect(parsePattern("pusher:**").score).toBe(4);
  });

  it("rejects pattern literals outside the Pusher alphabet", () => {
    for (const bad of ["pusher:a b", "pusher:a..b", "pusher:fo*", "pusher:a:b"]) {
      expect(() => parsePattern(bad), bad).toThrow(GrammarError);
    }
  });
});

describe("patterns", () => {
  it.each([
    "public:foo.bar",
    "private:foo.bar.7",
    "private:foo.bar.*",
    "private:foo.*.7",
    "private:*.bar.7",
    "private:foo.bar.**",
    "private:foo.bar.7.**",
    "public:**",
    "public:*",
    "public:a.b.c.d.e.f.g.h",
  ])("accepts %s and keeps its text", (s) => {
    expect(parsePattern(s).source).toBe(s);
  });

  it.each([
    "",
    ":foo.bar",
    "public:",
    "*:foo.bar",
    "**:foo",
    "secret:foo.bar",
    "public:foo:bar.baz",
    "public:foo..bar",
    "public:foo.**.bar",
    "public:**.foo",
    "public:FOO.bar",
    "public:fo*.bar",
    "public:***",
    "foo.bar",
  ])("rejects %j", (s) => {
    expect(() => parsePattern(s)).toThrow(GrammarError);
  });

  it("rejects a pattern deeper than 8 segments, saying so", () => {
    expect(() => parsePattern("private:a.b.c.d.e.f.g.h.i")).toThrow(/depth/);
  });

  it("scores literal 4, * 1, ** 0, the visibility word as a literal", () => {
    expect(parsePattern("public:a.b").score).toBe(12);
    expect(parsePattern("public:a.*").score).toBe(9);
    expect(parsePattern("public:a.**").score).toBe(8);
    expect(parsePattern("public:**").score).toBe(4);
    expect(parsePattern("private:*.*.*").score).toBe(7);
  });

  it("never throw anything but GrammarError; what they accept round-trips and never has a misplaced **", () => {
    fc.assert(
      fc.property(anyString, (s) => {
        const p = onlyThrows(() => parsePattern(s), GrammarError);
        if (!p) return;
        expect(p.source).toBe(s);
        expect(parsePattern(p.source)).toEqual(p);
        expect(p.segments.length).toBeGreaterThanOrEqual(1);
        expect(p.segments.length).toBeLessThanOrEqual(8);
        p.segments.forEach((seg, i) => {
          if (seg === "**") expect(i).toBe(p.segments.length - 1);
          else if (seg !== "*")
            expect(seg).toMatch(p.prefix === "pusher" ? /^[A-Za-z0-9_\-=@,;]{1,164}$/ : /^[a-z0-9_-]{1,64}$/);
        });
        expect(s).toMatch(/^(public|private|pusher):/);
      }),
      RUNS,
    );
  });

  it("a literal pattern matches exactly its own name; * matches one component, ** one or more", () => {
    fc.assert(
      fc.property(fc.array(component, { minLength: 2, maxLength: 4 }), component, (cs, extra) => {
        const text = `public:${cs.join(".")}`;
        const name = parseChannelName(text);
        expect(matchesPattern(parsePattern(text), name)).toBe(true);
        const star = `public:${[...cs.slice(0, -1), "*"].join(".")}`;
        expect(matchesPattern(parsePattern(star), name)).toBe(true);
        const prefix = `public:${cs[0]}.**`;
        expect(matchesPattern(parsePattern(prefix), name)).toBe(true);
        if (cs.length < 4) {
          const longer = parseChannelName(`${text}.${extra}`);
          expect(matchesPattern(parsePattern(text), longer)).toBe(false);
          expect(matchesPattern(parsePattern(star), longer)).toBe(false);
        }
      }),
      RUNS,
    );
  });
});

describe("matching", () => {
  const m = (p: string, n: string) => matchesPattern(parsePattern(p), name(n));

  it("matches exactly", () => {
    expect(m("private:foo.bar.7", "private:foo.bar.7")).toBe(true);
    expect(m("private:foo.bar.7", "private:foo.bar.8")).toBe(false);
  });

  it("* matches exactly one component", () => {
    expect(m("private:foo.bar.*", "private:foo.bar.7")).toBe(true);
    expect(m("private:foo.bar.*", "private:foo.bar.baz")).toBe(true);
    expect(m("private:foo.bar.*", "private:foo.bar.7.x")).toBe(false);
    expect(m("public:foo.*", "public:foo.bar")).toBe(true);
    expect(m("public:*", "public:foo.bar")).toBe(false);
  });

  it("** matches one or more remaining components", () => {
    expect(m("private:foo.bar.**", "private:foo.bar.7")).toBe(true);
    expect(m("private:foo.bar.**", "private:foo.bar.7.x")).toBe(true);
    expect(m("public:foo.bar.**", "public:foo.bar")).toBe(false);
    expect(m("public:**", "public:a.b.c.d")).toBe(true);
  });

  it("never crosses visibility", () => {
    expect(m("private:foo.bar.*", "public:foo.bar.x")).toBe(false);
    expect(m("public:**", "private:a.b.c")).toBe(false);
  });

  it("needs the same segment count without **", () => {
    expect(m("public:foo.*", "public:foo.bar.baz")).toBe(false);
    expect(m("public:a.b.c", "public:a.b")).toBe(false);
  });
});

describe("rule selection", () => {
  const rules = compileRules<string>([
    ["public:**", "any"],
    ["public:live.*", "live-star"],
    ["public:live.reactions", "exact"],
    ["public:*.reactions", "star-reactions"],
    ["public:live.**", "live-rest"],
  ]);
  const pick = (n: string) => selectRule(rules, name(n))?.value;

  it("picks the most specific match", () => {
    expect(pick("public:live.reactions")).toBe("exact");
    expect(pick("public:live.chat")).toBe("live-star");
    expect(pick("public:live.chat.x")).toBe("live-rest");
    expect(pick("public:other.reactions")).toBe("star-reactions");
    expect(pick("public:x.y.z")).toBe("any");
  });

  it("breaks ties by byte order of the pattern, not locale order", () => {
    // Equal scores (9): "public:a.*" vs "public:*.b" — '*' (0x2a) sorts before 'a' (0x61).
    const tied = compileRules<string>([
      ["public:a.*", "a-star"],
      ["public:*.b", "star-b"],
    ]);
    expect(selectRule(tied, name("public:a.b"))?.value).toBe("star-b");
    // Upper/lower case cannot occur, but '-' (0x2d) before '_' (0x5f) before letters must hold.
    const dash = compileRules<string>([
      ["public:x_y.*", "underscore"],
      ["public:x-y.*", "dash"],
    ]);
    expect(dash.map((r) => r.value)).toEqual(["dash", "underscore"]);
  });

  it("orders the compiled list most specific first, regardless of input order", () => {
    expect(rules.map((r) => r.pattern.source)).toEqual([
      "public:live.reactions",
      "public:*.reactions",
      "public:live.*",
      "public:live.**",
      "public:**",
    ]);
  });

  it("returns undefined when nothing matches", () => {
    expect(selectRule(rules, name("private:a.b.c"))).toBeUndefined();
  });
});
