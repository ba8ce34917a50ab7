/**
 * Every refusal is counted (docs/operations.md, "Metrics"): the reason of an answer for
 * `floodgate_refusals_total{reason}`, read from the answer itself, so one place counts the refusals of
 * every route whether it threw an error or returned one (the limiter gate's 429s are built directly).
 */

/** `"<bucket>";…` at the start of a 429's `RateLimit-Policy` (src/worker/gate/headers.ts). */
const POLICY_BUCKET = /^"([a-z-]{1,32})"/;

/** The reason an answer is a refusal, or null when it is not one. */
export function refusalReason(res: Response): string | null {
  switch (res.status) {
    case 401:
      return "unauthenticated";
    case 403:
      return "permission_denied";
    case 429:
      return POLICY_BUCKET.exec(res.headers.get("RateLimit-Policy") ?? "")?.[1] ?? "rate_limited";
    case 503:
      return "unavailable";
    default:
      return null;
  }
}
