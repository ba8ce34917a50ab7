/**
 * Hostile input, property-based (fast-check): the shorthand parser, the pattern grammar, channel names
 * and the token decoder never throw anything but their own errors, never accept what the grammar
 * forbids, and round-trip what they accept.
 */
import fc from "fast-check";
import { describe, expect, it } from "vitest";
import { feedForwardRate, nextDropRate } from "../functions/sampler";
import { DurationError, formatDuration, parseDuration } from "../src/settings/durations";
import { LimitError, limitToJson, parseLimit, parseRateShorthand } from "../src/settings/limits";
import {
  GrammarError,
  MAX_CHANNEL_LENGTH,
  MAX_COMPONENT_LENGTH,
  matchesPattern,
  parseChannelName,
  parsePattern,
} from "../src/wire/channel-names";
import { base64UrlEncode, signToken, TokenError, verifyToken } from "../src/worker/auth/tokens";

const RUNS = { numRuns: 500, seed: 20261129 };

/** Strings biased towards the grammar's own alphabet, so the parsers see near-misses, not just noise. */
const grammarish = fc.string({
  unit: fc.constantFrom(..."abcz019_-.:*/smhpublicrivate ".split(""), "**", "public:", "private:", "\u0000", "é", "🔥"),
  maxLength: 60,
});
const anyString = fc.oneof(grammarish, fc.string({ maxLength: 300 }), fc.string({ unit: "binary", maxLength: 80 }));

function onlyThrows<T>(f: () => T, errorClass: new (...args: never[]) => Error): T | undefined {
  try {
    return f();
  } catch (e) {
    expect(e).toBeInstanceOf(errorClass);
    return undefined;
  }
}

const component = fc.stringMatching(/^[a-z0-9_-]{1,12}$/);

describe("channel names", () => {
  it("never throw anything but GrammarError, and accept only what the grammar allows", () => {
    fc.assert(
      fc.property(anyString, (s) => {
        const name = onlyThrows(() => parseChannelName(s), GrammarError);
        if (!name) return;
        expect(name.name).toBe(s);
        expect(s.length).toBeLessThanOrEqual(MAX_CHANNEL_LENGTH);
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
          expect(`${name.visibility}:${name.components.join(".")}`).toBe(text);
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

describe("patterns", () => {
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
          else if (seg !== "*") expect(seg).toMatch(/^[a-z0-9_-]{1,64}$/);
        });
        expect(s).toMatch(/^(public|private):/);
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

describe("rate shorthand and durations", () => {
  it("never throw anything but LimitError / DurationError", () => {
    fc.assert(
      fc.property(anyString, (s) => {
        const r = onlyThrows(() => parseRateShorthand(s), LimitError);
        if (r) {
          expect(Number.isSafeInteger(r.rate) && r.rate > 0).toBe(true);
          expect(r.perMs).toBeGreaterThan(0);
        }
        onlyThrows(() => parseDuration(s), DurationError);
        onlyThrows(() => parseLimit(s), LimitError);
      }),
      RUNS,
    );
  });

  it("round-trip every accepted limit through its canonical wire form", () => {
    fc.assert(
      fc.property(
        fc.integer({ min: 1, max: 1_000_000 }),
        fc.integer({ min: 1, max: 86_400_000 }),
        fc.integer({ min: 0, max: 2_000_000 }),
        (rate, perMs, burst) => {
          const limit = parseLimit({ rate, per: formatDuration(perMs), burst });
          expect(limit).not.toBeNull();
          const json = limitToJson(limit);
          expect(parseLimit(json)).toEqual(limit);
          expect(parseDuration(json.per)).toBe(perMs);
          expect(limit?.burst).toBe(Math.max(rate, burst === 0 ? rate : burst));
        },
      ),
      RUNS,
    );
  });

  it("refuse non-integers, negative rates and unknown units", () => {
    for (const bad of ["1.5/s", "-1/s", "10/", "/s", "10/fortnight", "10/-1s", "1e3/s", "0x10/s", "10/s/s"]) {
      expect(() => parseRateShorthand(bad), bad).toThrow(LimitError);
    }
  });
});

describe("token decoder", () => {
  const secret = "property-secret-0123456789";
  const now = 1_800_000_000;

  it("never throws anything but TokenError on arbitrary input", async () => {
    await fc.assert(
      fc.asyncProperty(
        fc.oneof(
          anyString,
          fc.tuple(anyString, anyString, anyString).map(([a, b, c]) => `${a}.${b}.${c}`),
        ),
        async (s) => {
          await expect(verifyToken(s, secret, "access", now)).rejects.toBeInstanceOf(TokenError);
        },
      ),
      { ...RUNS, numRuns: 300 },
    );
  });

  it("refuses any single-character change to a valid token", async () => {
    const token = await signToken(
      { sub: "alice", typ: "access", chs: ["public:a.b"], scp: ["publish"], iat: now - 10, exp: now + 600, jti: "j1" },
      secret,
    );
    await expect(verifyToken(token, secret, "access", now)).resolves.toBeDefined();
    await fc.assert(
      fc.asyncProperty(
        fc.nat({ max: token.length - 1 }),
        fc.constantFrom(..."ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_.".split("")),
        async (i, ch) => {
          fc.pre(token[i] !== ch);
          const tampered = token.slice(0, i) + ch + token.slice(i + 1);
          // Base64url has spare bits: a change in the last character can decode to the same bytes.
          const same = await verifyToken(tampered, secret, "access", now).then(
            (v) => JSON.stringify(v.claims),
            () => null,
          );
          if (same !== null)
            expect(same).toBe(JSON.stringify((await verifyToken(token, secret, "access", now)).claims));
        },
      ),
      { ...RUNS, numRuns: 300 },
    );
  });

  it("refuses alg none, other algorithms, and a token signed with a different secret", async () => {
    const claims = {
      sub: "mallory",
      typ: "access",
      chs: ["public:**"],
      scp: ["publish"],
      iat: now,
      exp: now + 60,
      jti: "x",
    };
    const payload = base64UrlEncode(new TextEncoder().encode(JSON.stringify(claims)));
    for (const alg of ["none", "HS512", "RS256", "hs256"]) {
      const header = base64UrlEncode(new TextEncoder().encode(JSON.stringify({ alg, typ: "JWT" })));
      await expect(verifyToken(`${header}.${payload}.`, secret, "access", now)).rejects.toBeInstanceOf(TokenError);
      await expect(verifyToken(`${header}.${payload}.c2ln`, secret, "access", now)).rejects.toBeInstanceOf(TokenError);
    }
    const other = await signToken(claims as never, "the-admin-token-or-any-other-secret");
    await expect(verifyToken(other, secret, "access", now)).rejects.toMatchObject({ failure: "bad_signature" });
  });
});

/**
 * The throttle's law with priority traffic (docs/throttling.md, "Priority messages"), for priority
 * from none to far above the target: the drop rate of the rest is in [0,1]; below the target the
 * channel delivers exactly the target (priority + what passes of the rest) or everything offered;
 * from the target on, every other message is dropped.
 */
describe("the throttle's law with priority traffic", () => {
  const rate = fc.double({ min: 0, max: 1e5, noNaN: true, noDefaultInfinity: true });

  it("solves for the rest: P + N·(1 − p) = T below the target, p = 1 from it, p = 0 when all fits", () => {
    fc.assert(
      fc.property(
        rate,
        fc.double({ min: 0.01, max: 1e4, noNaN: true }),
        fc.double({ min: 0, max: 3, noNaN: true }),
        (rest, t, priorityShare) => {
          // Priority from 0 to 3× the target, the rest anything.
          const priority = priorityShare * t;
          const offered = priority + rest;
          const p = feedForwardRate(offered, t, priority);
          expect(p).toBeGreaterThanOrEqual(0);
          expect(p).toBeLessThanOrEqual(1);
          const delivered = priority + rest * (1 - p);
          if (offered <= t) {
            expect(p).toBe(0);
          } else if (priority >= t) {
            expect(p).toBe(1);
          } else {
            expect(p).toBeLessThan(1);
            expect(Math.abs(delivered - t)).toBeLessThanOrEqual(1e-9 * Math.max(1, offered));
          }
          // Priority is never held back: what is delivered is never below it, nor below min(offered, T).
          expect(delivered + 1e-9 * Math.max(1, offered)).toBeGreaterThanOrEqual(
            Math.min(offered, Math.max(t, priority)),
          );
        },
      ),
      RUNS,
    );
  });

  it("from a period's counts, the same law, whatever the period's length", () => {
    fc.assert(
      fc.property(
        fc.nat({ max: 100_000 }),
        fc.nat({ max: 100_000 }),
        fc.nat({ max: 100_000 }),
        fc.integer({ min: 1, max: 600_000 }),
        fc.integer({ min: 1, max: 1000 }),
        (priority, restDelivered, dropped, elapsedMs, perSecond) => {
          const counts = { delivered: priority + restDelivered, dropped, priority, elapsedMs, occupancy: 1 };
          const s = elapsedMs / 1000;
          const p = nextDropRate(counts, 0.5, { kind: "messages", perSecond });
          expect(p).toBe(feedForwardRate((priority + restDelivered + dropped) / s, perSecond, priority / s));
        },
      ),
      RUNS,
    );
  });
});
