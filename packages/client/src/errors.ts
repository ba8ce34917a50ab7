/** The client's errors, typed after the API's error codes (docs/api.md), and how a response becomes one. */

/** The error codes of the API (docs/api.md). */
export type ErrorCode =
  | "invalid_argument"
  | "unauthenticated"
  | "permission_denied"
  | "bad_route"
  | "resource_exhausted"
  | "internal"
  | "unavailable"
  | "network";

export class FloodgateError extends Error {
  readonly status: number;
  readonly code: ErrorCode;
  /** `meta.code`: e.g. `PAYLOAD_TOO_LARGE`, `RATE_LIMITED`. */
  readonly metaCode: string;
  readonly meta: Record<string, string>;
  /**
   * A 503's reason, from its `Floodgate-Refusal` header: `unavailable` (a backend could not be reached:
   * retry), or the bound it met (`max_subscribers`, `anonymous_subscribers`, `publish_overflow`,
   * `export_too_dense`); null for any other error.
   */
  readonly refusal: string | null;

  constructor(
    status: number,
    code: ErrorCode,
    message: string,
    meta: Record<string, string> = {},
    refusal: string | null = null,
  ) {
    super(message);
    this.name = "FloodgateError";
    this.status = status;
    this.code = code;
    this.metaCode = meta.code ?? code.toUpperCase();
    this.meta = meta;
    this.refusal = refusal;
  }
}

export class RateLimitedError extends FloodgateError {
  /** How long the server asked to wait. */
  readonly retryAfterMs: number;
  constructor(message: string, meta: Record<string, string>, retryAfterMs: number) {
    super(429, "resource_exhausted", message, meta);
    this.name = "RateLimitedError";
    this.retryAfterMs = retryAfterMs;
  }
}

/** The error an unsuccessful response stands for: its body's code and meta, its wait on a 429. */
export async function toError(res: Response): Promise<FloodgateError> {
  let body: { code?: string; msg?: string; meta?: Record<string, string> } = {};
  try {
    body = (await res.json()) as typeof body;
  } catch {
    // not the API's error shape (a proxy in between): keep the status
  }
  const meta = body.meta ?? {};
  const message = body.msg ?? `HTTP ${res.status}`;
  if (res.status === 429) {
    const fromHeader = Number(res.headers.get("retry-after")) * 1000;
    const fromBody = Number(meta.retry_after_ms);
    const retryAfterMs = Math.max(
      Number.isFinite(fromHeader) ? fromHeader : 0,
      Number.isFinite(fromBody) ? fromBody : 0,
    );
    return new RateLimitedError(message, meta, retryAfterMs || 1000);
  }
  const code = (body.code as ErrorCode | undefined) ?? (res.status >= 500 ? "unavailable" : "invalid_argument");
  const refusal = res.status === 503 ? res.headers.get("floodgate-refusal") : null;
  return new FloodgateError(res.status, code, message, meta, refusal);
}
