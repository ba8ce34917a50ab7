import { describe, expect, it } from "vitest";
import {
  compileRules,
  GrammarError,
  isChannelName,
  matchesPattern,
  parseChannelName,
  parsePattern,
  selectRule,
} from "../../src/wire/channel-names";

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
    expect(`${n.visibility}:${n.components.join(".")}`).toBe(s);
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
