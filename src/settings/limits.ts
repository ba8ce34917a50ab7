/**
 * The limit model (docs/operations.md, Configuration; docs/api.md, Rate limits): rate shorthand, burst normalisation and the limit object form.
 * Pure; the token bucket itself is in `token-bucket.ts`.
 */
import { DurationError, formatDuration, parseDuration } from "./durations";

/** A budget: `rate` tokens per `perMs` milliseconds, holding at most `burst`. */
export interface Limit {
  readonly rate: number;
  readonly perMs: number;
  readonly burst: number;
}

/** The wire form used in the manifest, token `rl` claims and config objects. */
export interface LimitJson {
  rate: number;
  per: string;
  burst: number;
}

/** What a disabled budget looks like in the manifest. */
export const DISABLED_LIMIT_JSON: LimitJson = { rate: 0, per: "0s", burst: 0 };

export class LimitError extends Error {
  constructor(message: string) {
    super(message);
    this.name = "LimitError";
  }
}

const INTEGER = /^\d+$/;
const BARE_UNIT: Record<string, number> = { s: 1000, m: 60_000, h: 3_600_000 };

/**
 * Parses `<integer>/<window>` (`500/s`, `10/1.5s`, `3/2m30s`). Blanks around are ignored.
 * Returns null when the budget is disabled (empty string or a rate of 0).
 * @throws LimitError naming the bad value.
 */
export function parseRateShorthand(input: string): { rate: number; perMs: number } | null {
  const s = input.trim();
  if (s.length === 0) return null;
  const slash = s.indexOf("/");
  if (slash < 0) throw new LimitError(`"${s}" is not a rate: expected <integer>/<window> such as 500/s`);
  const rateText = s.slice(0, slash).trim();
  const windowText = s.slice(slash + 1).trim();
  if (!INTEGER.test(rateText)) throw new LimitError(`"${s}": the rate must be a whole number`);
  const rate = Number(rateText);
  if (!Number.isSafeInteger(rate)) throw new LimitError(`"${s}": the rate is too large`);
  if (windowText.length === 0) throw new LimitError(`"${s}": the window is empty`);
  let perMs = BARE_UNIT[windowText];
  if (perMs === undefined) {
    try {
      perMs = parseDuration(windowText);
    } catch (e) {
      if (e instanceof DurationError) {
        throw new LimitError(`"${s}": unknown or missing unit in the window (use ms, s, m or h)`);
      }
      throw e;
    }
  }
  if (!(perMs > 0)) throw new LimitError(`"${s}": the window must be positive`);
  if (rate === 0) return null;
  return { rate, perMs };
}

/**
 * Parses a burst value: empty or `0` means "same as the rate"; a burst below the rate is raised
 * to the rate. @throws LimitError
 */
export function normaliseBurst(rate: number, burst: string | number | undefined): number {
  if (burst === undefined) return rate;
  const text = String(burst).trim();
  if (text === "" || text === "0") return rate;
  if (!INTEGER.test(text) || !Number.isSafeInteger(Number(text))) {
    throw new LimitError(`"${text}": the burst must be a whole number`);
  }
  return Math.max(rate, Number(text));
}

/** Whether two limits are the same rate, window and burst. */
export function sameLimit(a: Limit, b: Limit): boolean {
  return a.rate === b.rate && a.perMs === b.perMs && a.burst === b.burst;
}

/**
 * Parses a limit given as a shorthand string or as `{"rate":N,"per":"1s","burst":N}`.
 * Returns null when disabled. @throws LimitError
 */
export function parseLimit(value: unknown): Limit | null {
  if (typeof value === "string") {
    const r = parseRateShorthand(value);
    return r ? { ...r, burst: r.rate } : null;
  }
  if (value === null || typeof value !== "object" || Array.isArray(value)) {
    throw new LimitError("a limit must be a shorthand string or an object {rate, per, burst}");
  }
  const o = value as Record<string, unknown>;
  for (const k of Object.keys(o)) {
    if (k !== "rate" && k !== "per" && k !== "burst") throw new LimitError(`unknown limit field "${k}"`);
  }
  if (typeof o.rate !== "number" || !Number.isSafeInteger(o.rate) || o.rate < 0) {
    throw new LimitError("limit rate must be a whole number ≥ 0");
  }
  const per = o.per === undefined ? "1s" : o.per;
  if (typeof per !== "string") throw new LimitError('limit "per" must be a duration string such as "1s"');
  const window = parseRateShorthand(`1/${per}`);
  if (!window) throw new LimitError(`limit "per" ${JSON.stringify(per)} is not a positive duration`);
  if (o.rate === 0) return null;
  if (o.burst !== undefined && typeof o.burst !== "number") throw new LimitError("limit burst must be a number");
  return { rate: o.rate, perMs: window.perMs, burst: normaliseBurst(o.rate, o.burst as number | undefined) };
}

/** The wire form of a limit (disabled → `{"rate":0,"per":"0s","burst":0}`). */
export function limitToJson(limit: Limit | null): LimitJson {
  if (!limit) return { ...DISABLED_LIMIT_JSON };
  return { rate: limit.rate, per: formatDuration(limit.perMs), burst: limit.burst };
}
