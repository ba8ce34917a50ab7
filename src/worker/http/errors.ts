/**
 * The API's error shape (docs/api.md): `{"code","msg","meta":{"code",…}}`.
 *
 * Every failure the API reports is an {@link ApiError}; anything else that escapes a handler is
 * logged and answered as a generic 500 so backend text never reaches a client.
 */
import { HTTPException } from "hono/http-exception";

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

  toBody(): { code: string; msg: string; meta: Record<string, string> } {
    const k = ERROR_KINDS[this.kind];
    return { code: k.code, msg: this.message, meta: { code: k.metaCode, ...this.meta } };
  }

  toResponse(extraHeaders: Record<string, string> = {}): Response {
    return Response.json(this.toBody(), {
      status: this.status,
      headers: { ...this.headers, ...extraHeaders },
    });
  }
}

export const invalidArgument = (msg: string, meta?: ErrorMeta) => new ApiError("invalid_argument", msg, meta);
export const unauthenticated = (msg: string) => new ApiError("unauthenticated", msg);
export const permissionDenied = (msg: string) => new ApiError("permission_denied", msg);
export const internal = (msg = "internal error") => new ApiError("internal", msg);

/**
 * Turns anything thrown into a response that carries no backend text. An HTTPException is Hono
 * middleware's answer (`bearerAuth` throws one carrying the response src/worker/auth/authorise.ts gave it).
 */
export function errorResponse(err: unknown): Response {
  if (err instanceof ApiError) return err.toResponse();
  if (err instanceof HTTPException && err.res) return err.getResponse();
  console.error("floodgate: unhandled error", err instanceof Error ? (err.stack ?? err.message) : err);
  return internal().toResponse();
}

/**
 * Runs a call to a backend (a Durable Object, KV) and turns its failure into a 503 that names only
 * `what`; the backend's own text goes to the log, never to the client.
 */
export async function orUnavailable<T>(what: string, call: () => Promise<T>, hint = "retry"): Promise<T> {
  try {
    return await call();
  } catch (e) {
    if (e instanceof ApiError) throw e;
    console.error(`floodgate: ${what} unavailable`, e instanceof Error ? e.message : e);
    throw new ApiError("unavailable", `${what} is temporarily unavailable; ${hint}`);
  }
}
