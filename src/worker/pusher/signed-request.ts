/**
 * The Pusher HTTP API's door (docs/api.md, "The Pusher door"): every request under `/apps/{id}` is
 * checked in order — the app id (404 for any other, or when the door is closed), the body (at most
 * 10 × `MAX_MESSAGE_BYTES`, 413), the signature (`auth_key`, `auth_timestamp` within 600 s,
 * `auth_version`, `body_md5`, `auth_signature`: 401) — and refused with a short text body as Pusher's
 * own servers answer, counted in `/metrics` (`floodgate_pusher_errors_total{kind="http"}`), with
 * nothing changed. Its failures are short text too: a 503 to retry, a 500 without backend text.
 */
import type { Context } from "hono";
import type { PusherApp } from "../../settings/pusher";
import { ApiError } from "../../wire/errors";
import { httpApiProblem, ordinaryParams } from "../../wire/pusher/signatures";
import type { AppEnv } from "../app-env";
import { readBody } from "../http/body";

/** A refusal of the Pusher HTTP API: its status and short text. */
export class PusherHttpError extends Error {
  constructor(
    readonly status: 400 | 401 | 403 | 404 | 413 | 429 | 500 | 503,
    message: string,
    readonly headers: Record<string, string> = {},
  ) {
    super(message);
  }
}

/** Most bytes of a request body: ten of the largest messages (a batch of ten events). */
export const bodyLimit = (maxMessageBytes: number) => 10 * maxMessageBytes;

export interface SignedRequest {
  app: PusherApp;
  /** The body as text (empty for a GET). */
  body: string;
  /** The query parameters other than the signature's. */
  params: Map<string, string>;
}

const utf8 = new TextDecoder("utf-8", { fatal: true, ignoreBOM: false });

/** Checks a request of the HTTP API (see the module comment). @throws PusherHttpError */
export async function signedRequest(c: Context<AppEnv>): Promise<SignedRequest> {
  const svc = c.get("svc");
  const app = svc.config.pusher.app;
  if (!app || c.req.param("id") !== app.id) throw new PusherHttpError(404, "Unknown app");
  let body = "";
  if (c.req.method === "POST") {
    try {
      body = utf8.decode(await readBody(c.req.raw, bodyLimit(svc.config.maxMessageBytes)));
    } catch (e) {
      if (e instanceof ApiError && e.status === 413) throw new PusherHttpError(413, "Request body too large");
      throw new PusherHttpError(400, "Request body is not UTF-8");
    }
  }
  const url = new URL(c.req.url);
  const problem = await httpApiProblem(
    app,
    c.req.method,
    url.pathname,
    url.searchParams.entries(),
    body,
    Math.floor(Date.now() / 1000),
  );
  if (problem) throw new PusherHttpError(401, `Unauthorized: ${problem}`);
  return { app, body, params: ordinaryParams(url.searchParams.entries()) };
}

/**
 * Runs a handler of the HTTP API: every error becomes a short text answer, as Pusher's servers give,
 * counted. A refusal of the app's own (an {@link ApiError}) keeps its status, its text and its headers
 * (a 503's `Floodgate-Refusal` and `Retry-After`); a backend failure (the limiter's 500, anything
 * unexpected) is a 500 with no backend text, logged.
 */
export async function pusherAnswer(c: Context<AppEnv>, handle: () => Promise<Response>): Promise<Response> {
  try {
    return await handle();
  } catch (e) {
    const refusal = pusherRefusal(e);
    c.get("svc").metrics.inc("floodgate_pusher_errors_total", { kind: "http", code: String(refusal.status) });
    return new Response(`${refusal.message}\n`, {
      status: refusal.status,
      headers: { "content-type": "text/plain; charset=utf-8", ...refusal.headers },
    });
  }
}

const API_ERROR_STATUSES = new Set<number>([400, 401, 403, 404, 413, 429]);

/** What the HTTP API answers for `e`, thrown by one of its handlers. */
function pusherRefusal(e: unknown): PusherHttpError {
  if (e instanceof PusherHttpError) return e;
  if (e instanceof ApiError && e.status === 503) {
    // Its headers name the reason (`Floodgate-Refusal`, counted by it) and the wait (`Retry-After`).
    return new PusherHttpError(503, "Service unavailable; retry", e.headers);
  }
  if (e instanceof ApiError && API_ERROR_STATUSES.has(e.status)) {
    // The app's own words, never a backend's (docs/api.md, "Errors").
    return new PusherHttpError(e.status as PusherHttpError["status"], e.message, e.headers);
  }
  if (!(e instanceof ApiError)) {
    console.error("floodgate: unhandled error", e instanceof Error ? (e.stack ?? e.message) : e);
  }
  return new PusherHttpError(500, "Internal error");
}

/** A JSON body, or 400. */
export function parseBody(body: string): unknown {
  try {
    return JSON.parse(body);
  } catch {
    throw new PusherHttpError(400, "Request body is not valid JSON");
  }
}
