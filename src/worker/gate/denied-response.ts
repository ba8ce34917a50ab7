/**
 * A denied publish's 429, answered by the route itself (src/worker/routes/publish.ts): the answer of a
 * flood's every request. The limiter decides and says what the 429 holds (src/limiter/denials.ts);
 * this builds the HTTP answer.
 */
import type { Denial } from "../../limiter/denials";
import { denialParts } from "../../limiter/denials";
import { ERROR_KINDS } from "../../wire/errors";
import { securedJson } from "../http/security-headers";

/**
 * The same 429 as `deniedError(denial).toResponse()` (src/limiter/denials.ts), built directly with the security headers
 * (src/worker/http/security-headers.ts): the answer of a flood's every request, so it makes no Error object
 * and sets no header twice.
 */
export function deniedResponse(denial: Denial): Response {
  const { message, meta, headers } = denialParts(denial);
  const kind = ERROR_KINDS.rate_limited;
  return securedJson({ code: kind.code, msg: message, meta: { code: kind.metaCode, ...meta } }, kind.status, headers);
}
