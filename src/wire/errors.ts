/**
 * The API's errors (docs/api.md, "Errors"): each kind with its HTTP status and its `code` /
 * `meta.code` pair, and {@link ApiError}, which domain code throws — the Worker's routes, the
 * objects, the settings alike. Only the HTTP layer (src/worker/http/errors.ts) turns one into a
 * response `{"code","msg","meta":{"code",…}}`. Pure and self-contained.
 */

/** Error kinds and the HTTP status and codes each one maps to. */
export const ERROR_KINDS = {
  invalid_argument: { status: 400, code: "invalid_argument", metaCode: "INVALID_ARGUMENT" },
  unauthenticated: { status: 401, code: "unauthenticated", metaCode: "UNAUTHENTICATED" },
  permission_denied: { status: 403, code: "permission_denied", metaCode: "PERMISSION_DENIED" },
  not_found: { status: 404, code: "bad_route", metaCode: "NOT_FOUND" },
  payload_too_large: { status: 413, code: "invalid_argument", metaCode: "PAYLOAD_TOO_LARGE" },
  rate_limited: { status: 429, code: "resource_exhausted", metaCode: "RATE_LIMITED" },
  internal: { status: 500, code: "internal", metaCode: "INTERNAL" },
  unavailable: { status: 503, code: "unavailable", metaCode: "UNAVAILABLE" },
} as const;

export type ErrorKind = keyof typeof ERROR_KINDS;

/** Extra string fields placed in `meta` beside `code`. */
export type ErrorMeta = Record<string, string>;

/** An error body as the API sends it. */
export interface ErrorBody {
  code: string;
  msg: string;
  meta: Record<string, string>;
}

/** A refusal or failure the API reports in its error shape; `headers` go on the response (`Retry-After`, …). */
export class ApiError extends Error {
  readonly kind: ErrorKind;
  readonly meta: ErrorMeta;
  readonly headers: Record<string, string>;

  constructor(kind: ErrorKind, msg: string, meta: ErrorMeta = {}, headers: Record<string, string> = {}) {
    // An ApiError is an answer, not a bug: it never needs a stack, and capturing one was a fifth of
    // the CPU of a denied publish (a flooding client makes thousands a second).
    const V8Error = Error as ErrorConstructor & { stackTraceLimit: number };
    const limit = V8Error.stackTraceLimit;
    V8Error.stackTraceLimit = 0;
    super(msg);
    V8Error.stackTraceLimit = limit;
    this.name = "ApiError";
    this.kind = kind;
    this.meta = meta;
    this.headers = headers;
  }

  get status(): number {
    return ERROR_KINDS[this.kind].status;
  }

  toBody(): ErrorBody {
    const k = ERROR_KINDS[this.kind];
    return { code: k.code, msg: this.message, meta: { code: k.metaCode, ...this.meta } };
  }
}

/**
 * Why a 503 was answered (docs/api.md, "Errors"): a bound the request met — `max_subscribers`
 * (`MAX_SUBSCRIBERS`), `anonymous_subscribers` (`ANONYMOUS_SHARE`), `publish_overflow` (the
 * isolate's waiting publishes at their byte cap), `export_too_dense` (an hour of the record too
 * dense to export) — or `unavailable`, a backend that could not be reached. Each is a reason of
 * `floodgate_refusals_total`, at both doors.
 */
export const UNAVAILABLE_REASONS = [
  "max_subscribers",
  "anonymous_subscribers",
  "publish_overflow",
  "export_too_dense",
  "unavailable",
] as const;
export type UnavailableReason = (typeof UNAVAILABLE_REASONS)[number];

/** The header of a 503 that names its {@link UnavailableReason}, read back where refusals are counted. */
export const REFUSAL_HEADER = "Floodgate-Refusal";

export function isUnavailableReason(s: string | null | undefined): s is UnavailableReason {
  return (UNAVAILABLE_REASONS as readonly (string | null | undefined)[]).includes(s);
}

/** The 503 of `reason`, naming it in {@link REFUSAL_HEADER}; with `Retry-After` when a wait helps. */
export function unavailable(reason: UnavailableReason, msg: string, retryAfterS?: number): ApiError {
  const headers: Record<string, string> = { [REFUSAL_HEADER]: reason };
  if (retryAfterS !== undefined) headers["retry-after"] = String(retryAfterS);
  return new ApiError("unavailable", msg, {}, headers);
}

export const invalidArgument = (msg: string, meta?: ErrorMeta) => new ApiError("invalid_argument", msg, meta);
export const unauthenticated = (msg: string) => new ApiError("unauthenticated", msg);
export const permissionDenied = (msg: string) => new ApiError("permission_denied", msg);
export const internal = (msg = "internal error") => new ApiError("internal", msg);
