/**
 * Durations as written in config, token requests and the manifest: one or more `<number><unit>`
 * parts (`500ms`, `1.5s`, `2m30s`), units `ms`, `s`, `m`, `h` (and `d` where a caller allows it).
 * Pure.
 */

const UNIT_MS: Record<string, number> = { ms: 1, s: 1000, m: 60_000, h: 3_600_000, d: 86_400_000 };
const PART = /(\d+(?:\.\d+)?)(ms|s|m|h|d)/y;

/** Why a duration did not parse. */
export class DurationError extends Error {
  constructor(message: string) {
    super(message);
    this.name = "DurationError";
  }
}

export interface DurationOptions {
  /** Accept the `d` unit (token lifetimes); rate windows do not. Default false. */
  allowDays?: boolean;
  /**
   * Accept `0` alone as zero: for a setting whose range starts at 0 (`FRAME_DELAY`, written "0 to
   * 1s"). Elsewhere a bare number, 0 too, is a missing unit (a rate window `10/0`). Default false.
   */
  allowBareZero?: boolean;
}

/**
 * Parses a duration into milliseconds. Surrounding blanks are ignored.
 * @throws DurationError for an empty string, an unknown or missing unit, or a malformed number.
 */
export function parseDuration(input: string, opts: DurationOptions = {}): number {
  const s = input.trim();
  if (s.length === 0) throw new DurationError("duration is empty");
  // Zero needs no unit where zero is in range (an operator writes FRAME_DELAY=0 as readily as 0ms);
  // any other bare number is refused, since its unit would be a guess.
  if (s === "0" && opts.allowBareZero) return 0;
  let total = 0;
  PART.lastIndex = 0;
  let pos = 0;
  while (pos < s.length) {
    PART.lastIndex = pos;
    const m = PART.exec(s);
    if (!m) throw new DurationError(`"${s}" is not a duration: use parts like 500ms, 1.5s, 2m30s`);
    const unit = m[2] as string;
    if (unit === "d" && !opts.allowDays) throw new DurationError(`unit "d" is not allowed in "${s}"`);
    total += Number(m[1]) * (UNIT_MS[unit] as number);
    pos = PART.lastIndex;
  }
  if (!Number.isFinite(total)) throw new DurationError(`"${s}" is too long`);
  return total;
}

/**
 * Writes milliseconds in canonical form: `1m` not `60s`, `1m30s`, `1.5s` not `1500ms`, `500ms`,
 * `0s` for zero.
 */
export function formatDuration(ms: number): string {
  if (ms <= 0) return "0s";
  if (ms < 1000) return `${trim(ms)}ms`;
  const h = Math.floor(ms / 3_600_000);
  const m = Math.floor((ms % 3_600_000) / 60_000);
  const sMs = ms - h * 3_600_000 - m * 60_000;
  let out = "";
  if (h) out += `${h}h`;
  if (m) out += `${m}m`;
  if (sMs) out += `${trim(sMs / 1000)}s`;
  return out;
}

/** Drops floating-point noise (0.30000000000000004 → 0.3) without rounding real precision away. */
function trim(n: number): string {
  return String(Number(n.toPrecision(12)));
}
