/**
 * The HTTP side of the API's errors (docs/api.md, "Errors"): an {@link ApiError} (src/wire/errors.ts)
 * becomes a response `{"code","msg","meta":{"code",…}}`; anything else that escapes a handler is
 * logged and answered as a generic 500 so backend text never reaches a client.
 */
import { HTTPException } from "hono/http-exception";
import { ApiError, internal, unavailable } from "../../wire/errors";

/** The response for an API error, with its own headers and `extraHeaders`. */
export function apiErrorResponse(err: ApiError, extraHeaders: Record<string, string> = {}): Response {
  return Response.json(err.toBody(), { status: err.status, headers: { ...err.headers, ...extraHeaders } });
}

/**
 * Turns anything thrown into a response that carries no backend text. An HTTPException is Hono
 * middleware's answer (`bearerAuth` throws one carrying the response src/worker/auth/authorise.ts gave it).
 */
export function errorResponse(err: unknown): Response {
  if (err instanceof ApiError) return apiErrorResponse(err);
  if (err instanceof HTTPException && err.res) return err.getResponse();
  console.error("floodgate: unhandled error", err instanceof Error ? (err.stack ?? err.message) : err);
  return apiErrorResponse(internal());
}

/**
 * Runs a call to a backend (a Durable Object, KV) and turns its failure into a 503 `unavailable` that
 * names only `what`; the backend's own text goes to the log, never to the client.
 */
export async function orUnavailable<T>(what: string, call: () => Promise<T>, hint = "retry"): Promise<T> {
  try {
    return await call();
  } catch (e) {
    if (e instanceof ApiError) throw e;
    console.error(`floodgate: ${what} unavailable`, e instanceof Error ? e.message : e);
    throw unavailable("unavailable", `${what} is temporarily unavailable; ${hint}`);
  }
}
