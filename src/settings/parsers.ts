/**
 * How each kind of variable is read (docs/operations.md, Configuration): budgets, JSON objects of
 * channel pattern → value, whole numbers and durations within bounds. Every failure is a
 * {@link ConfigError} naming the variable and the bad value; defaults come from ./variables.ts only.
 */
import { PointerError } from "../../functions/drop-summary";
import {
  type ChannelPattern,
  compileRules,
  GrammarError,
  parsePattern,
  type Rule,
  whyNeverMatches,
} from "../wire/channel-names";
import { DurationError, type DurationOptions, parseDuration } from "./durations";
import { type Limit, LimitError, normaliseBurst, parseRateShorthand } from "./limits";
import { type ConfigVariable, DEFAULTS, type RawConfig } from "./variables";

/** A variable that does not parse. The message names the variable and the bad value. */
export class ConfigError extends Error {
  readonly variable: string;
  constructor(variable: string, detail: string) {
    super(`invalid configuration: ${variable}: ${detail}`);
    this.name = "ConfigError";
    this.variable = variable;
  }
}

/** Runs a parser, turning what it throws about the value into a {@link ConfigError} for `variable`. */
export function wrap<T>(variable: string, f: () => T): T {
  try {
    return f();
  } catch (e) {
    if (e instanceof ConfigError) throw e;
    if (
      e instanceof LimitError ||
      e instanceof GrammarError ||
      e instanceof DurationError ||
      e instanceof PointerError ||
      e instanceof SyntaxError ||
      e instanceof RangeError
    ) {
      throw new ConfigError(variable, e.message);
    }
    throw e;
  }
}

/** The value written, or where none (or, `emptyIsAbsent`, a blank one) is, the variable's default. */
export function textOf(raw: RawConfig, variable: ConfigVariable, emptyIsAbsent = true): string {
  const given = raw[variable];
  if (given !== undefined && !(emptyIsAbsent && given.trim() === "")) return given.trim();
  return DEFAULTS[variable] ?? "";
}

/** A budget from its rate and burst variables; a rate with no default must be present. */
export function budget(raw: RawConfig, rateVar: ConfigVariable, burstVar: ConfigVariable): Limit | null {
  const given = raw[rateVar];
  if (given === undefined && DEFAULTS[rateVar] === null) {
    throw new ConfigError(rateVar, 'is not set (set it to a rate such as "10/s", or to "" to disable this budget)');
  }
  // An explicit empty rate disables the budget: only an absent one takes the default.
  const rate = wrap(rateVar, () => parseRateShorthand(given ?? DEFAULTS[rateVar] ?? ""));
  const burstText = raw[burstVar] ?? DEFAULTS[burstVar] ?? "";
  // Validate the burst even when the budget is disabled, so a typo is never silently ignored.
  const burst = wrap(burstVar, () => normaliseBurst(rate?.rate ?? 1, burstText));
  return rate ? { ...rate, burst } : null;
}

function jsonObject(variable: string, text: string | undefined): Record<string, unknown> {
  const t = (text ?? "").trim();
  if (t === "") return {};
  return wrap(variable, () => {
    const v: unknown = JSON.parse(t);
    if (v === null || typeof v !== "object" || Array.isArray(v)) {
      throw new ConfigError(variable, "must be a JSON object of channel pattern → value");
    }
    return v as Record<string, unknown>;
  });
}

/**
 * A pattern written in `variable`, which some channel name must be able to match: one no name can
 * match would be a rule that never applies, so it is refused with the reason a mint gives. Either
 * failure names the pattern.
 */
export function configPattern(variable: string, source: string): ChannelPattern {
  let pattern: ChannelPattern;
  try {
    pattern = parsePattern(source);
  } catch (e) {
    if (e instanceof GrammarError) throw new ConfigError(variable, `${source}: ${e.message}`);
    throw e;
  }
  const why = whyNeverMatches(pattern);
  if (why) throw new ConfigError(variable, `${source}: ${why}`);
  return pattern;
}

/** A JSON object of channel pattern → value, compiled into rules in selection order. */
export function patternRules<T>(raw: RawConfig, variable: ConfigVariable, parse: (v: unknown) => T): Rule<T>[] {
  const obj = jsonObject(variable, raw[variable]);
  return wrap(variable, () =>
    compileRules(
      Object.entries(obj).map(([pattern, v]) => {
        configPattern(variable, pattern);
        try {
          return [pattern, parse(v)] as const;
        } catch (e) {
          if (e instanceof Error) throw new ConfigError(variable, `${pattern}: ${e.message}`);
          throw e;
        }
      }),
    ),
  );
}

/** A whole number from `min` to `max` (an empty value takes the default). */
export function wholeNumber(raw: RawConfig, variable: ConfigVariable, min = 1, max = Number.MAX_SAFE_INTEGER): number {
  const t = textOf(raw, variable);
  if (!/^\d+$/.test(t) || !Number.isSafeInteger(Number(t)) || Number(t) < min) {
    throw new ConfigError(variable, `"${t}" must be a whole number ≥ ${min}`);
  }
  const n = Number(t);
  if (n > max) throw new ConfigError(variable, `"${n}" must be at most ${max}`);
  return n;
}

/** A decimal fraction from 0 to 1, both included (an empty value takes the default). */
export function fraction(raw: RawConfig, variable: ConfigVariable): number {
  const t = textOf(raw, variable);
  const n = Number(t);
  if (!/^\d+(\.\d+)?$/.test(t) || !(n >= 0 && n <= 1)) {
    throw new ConfigError(variable, `"${t}" must be a fraction from 0 to 1, such as 0.5`);
  }
  return n;
}

/**
 * A duration in milliseconds from `minMs` to `maxMs` (an empty value takes the default); `range`
 * is how the error message states the bounds ("from 1s to 1h", "at least 1s").
 */
export function duration(
  raw: RawConfig,
  variable: ConfigVariable,
  minMs: number,
  maxMs: number,
  range: string,
  options: DurationOptions = {},
): number {
  const t = textOf(raw, variable);
  const ms = wrap(variable, () => parseDuration(t, options));
  if (!(ms >= minMs && ms <= maxMs)) throw new ConfigError(variable, `"${t}" must be ${range}`);
  return ms;
}
