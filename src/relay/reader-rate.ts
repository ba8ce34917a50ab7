/**
 * A subscriber's own rate (`?max_rate=`, docs/api.md, "Each reader's rate"): how it is read from the
 * subscribe, what range it may take, and how it is compared with the rates its relay thins it to.
 * The Worker reads it (400 outside the range) and hands it to the relay, which holds the subscriber to it.
 */
import { LimitError, parseRateShorthand } from "../settings/limits";
import { invalidArgument } from "../wire/errors";

/** `n` messages per `perMs` milliseconds. */
export interface ReaderRate {
  readonly n: number;
  readonly perMs: number;
}

/** The slowest a subscriber may ask for, and the slowest its relay thins it to: 1 message a second. */
export const MIN_READER_RATE_PER_S = 1;
/** The fastest a subscriber may ask for. */
export const MAX_READER_RATE_PER_S = 1000;

const RANGE = `from ${MIN_READER_RATE_PER_S}/s to ${MAX_READER_RATE_PER_S}/s`;

/** Messages per second. */
export function perSecond(r: ReaderRate): number {
  return (r.n * 1000) / r.perMs;
}

/**
 * `max_rate`'s value: any rate shorthand (docs/api.md, "Rate shorthand") worth 1 to 1,000 messages a
 * second (`5/s`, `120/m`). @throws ApiError 400 for anything else, an empty value included.
 */
export function parseMaxRate(text: string): ReaderRate {
  let r: { rate: number; perMs: number } | null;
  try {
    r = parseRateShorthand(text);
  } catch (e) {
    if (!(e instanceof LimitError)) throw e;
    r = null;
  }
  const rate = r ? { n: r.rate, perMs: r.perMs } : null;
  if (!rate || perSecond(rate) < MIN_READER_RATE_PER_S || perSecond(rate) > MAX_READER_RATE_PER_S) {
    throw invalidArgument(`max_rate must be a rate ${RANGE}, such as 5/s or 120/m`);
  }
  return rate;
}

/** Whether `a` lets through fewer messages a second than `b` (exact: no division). */
export function slowerThan(a: ReaderRate, b: ReaderRate): boolean {
  return a.n * b.perMs < b.n * a.perMs;
}

/** As a subscribe call carries it to the relay (`n/perMs`), and back. */
export function rateText(r: ReaderRate): string {
  return `${r.n}/${r.perMs}`;
}

/** A rate as {@link rateText} wrote it, or null when absent or not one. */
export function readRateText(text: string | null): ReaderRate | null {
  if (text === null) return null;
  const [n, perMs] = text.split("/").map(Number);
  if (!Number.isSafeInteger(n) || !(n !== undefined && n > 0) || !(perMs !== undefined && perMs > 0)) return null;
  return { n, perMs };
}
