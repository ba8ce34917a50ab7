/**
 * Every refusal is counted (docs/operations.md, "Metrics"): the reason of an answer for
 * `floodgate_refusals_total{reason}`, read from the answer itself, so one place counts the refusals of
 * every route whether it threw an error or returned one (the limiter gate's 429s are built directly).
 * A 429 names its bucket in `RateLimit-Policy`, a 503 its reason in `Floodgate-Refusal`.
 */
import { refusalReasonOf } from "../../metrics/series";
import { REFUSAL_HEADER } from "../../wire/errors";

/** `"<bucket>";…` at the start of a 429's `RateLimit-Policy` (src/limiter/denials.ts). */
const POLICY_BUCKET = /^"([a-z-]{1,32})"/;

/** The reason an answer is a refusal, or null when it is not one. */
export function refusalReason(res: Response): string | null {
  const named =
    res.status === 429
      ? POLICY_BUCKET.exec(res.headers.get("RateLimit-Policy") ?? "")?.[1]
      : res.status === 503
        ? (res.headers.get(REFUSAL_HEADER) ?? undefined)
        : undefined;
  return refusalReasonOf(res.status, named);
}
