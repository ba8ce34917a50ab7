/**
 * Browsers on other origins (docs/api.md, "Browsers on other origins"): `CORS_ORIGINS` lists the
 * origins whose pages may call the API. For a listed origin every `/v1/` route and `/app/` answers
 * with `Access-Control-Allow-Origin: <that origin>`, preflights answer 204, and the rate-limit headers
 * a script needs are exposed. `*` lets any origin make public reads only — subscribe to and read the
 * history of a public channel, and the manifest — and never a request that carries
 * `Authorization`. An origin not listed gets no CORS headers (its preflight answers 403), and its
 * WebSocket upgrades answer 403: a browser sends `Origin` on a WebSocket but never preflights one.
 * Under `*` such an origin may still open a Pusher connection (`/app/`), marked public reads only
 * ({@link publicReadsOnly}): its host refuses it every private and presence channel, so a page on any
 * site cannot ride a visitor's app session (signatures from the app's auth endpoint) into them.
 * Requests without `Origin` (servers, native apps) are not touched.
 *
 * Hono's own `cors` middleware sets its headers before the handler runs and answers every preflight
 * 204, so it cannot refuse an origin's preflight or decide by the route and token as this must.
 */
import { createMiddleware } from "hono/factory";
import { type CorsOrigins, corsOrigins, type RawConfig } from "../../settings/settings";
import { isChannelName, parseChannelName } from "../../wire/channel-names";
import { permissionDenied } from "../../wire/errors";
import type { AppEnv } from "../app-env";
import { apiErrorResponse } from "./errors";

/** The methods the API answers to. */
const ALLOW_METHODS = "GET, POST, PUT, DELETE";
/** The request headers Floodgate reads. */
const ALLOW_HEADERS =
  "Authorization, Content-Type, Idempotency-Key, Floodgate-Priority, Floodgate-Shard, Last-Event-ID";
/** The response headers a script may read: when to retry, how much budget is left, why a 503 refused. */
const EXPOSE_HEADERS = "Retry-After, RateLimit, RateLimit-Policy, Floodgate-Refusal";
/** How long a browser may reuse a preflight's answer, in seconds (Chromium caps it at 2 hours). */
const MAX_AGE_S = 600;

/** What an origin may do: everything, public reads only (`*`), or nothing. */
type Grant = "listed" | "public" | "none";

/**
 * What `origin` may do, or null when `CORS_ORIGINS` lists nothing: the API is then for its own origin,
 * servers and native apps, as without CORS at all (no CORS headers, WebSockets from any origin), and
 * a preflight, which only a page on another origin sends, is refused.
 */
function grantOf(cors: CorsOrigins, origin: string): Grant | null {
  if (cors.origins.size === 0 && !cors.anyForPublicReads) return null;
  if (cors.origins.has(origin)) return "listed";
  return cors.anyForPublicReads ? "public" : "none";
}

/**
 * Whether a request from `origin` (its `Origin` header) may make public reads only: under `*`, from an
 * origin not listed. A Pusher connection carries this to its host (src/connection-host/), which refuses
 * it private and presence channels; no `Origin` (servers, native apps) and listed origins are not.
 */
export function publicReadsOnly(cors: CorsOrigins, origin: string | undefined): boolean {
  return origin !== undefined && grantOf(cors, origin) === "public";
}

/**
 * `/v1/{subscribe,history}/<public channel>` and the manifest, read with GET: the public reads the API
 * names, and no more (a public channel's presence, `/v1/presence`, needs the origin listed).
 */
function isPublicRead(method: string, path: string): boolean {
  if (method !== "GET" && method !== "HEAD") return false;
  if (path === "/v1/manifest") return true;
  const m = /^\/v1\/(?:subscribe|history)\/([^/]+)$/.exec(path);
  if (!m?.[1]) return false;
  let name: string;
  try {
    name = decodeURIComponent(m[1]);
  } catch {
    return false;
  }
  return isChannelName(name) && parseChannelName(name).visibility === "public";
}

/** The paths CORS applies to. */
function inScope(path: string): boolean {
  return path.startsWith("/v1/") || path.startsWith("/app/");
}

export const cors = createMiddleware<AppEnv>(async (c, next) => {
  const origin = c.req.header("origin");
  const path = c.req.path;
  if (!origin || !inScope(path)) return next();
  const grant = grantOf(c.var.svc.config.cors, origin);
  // No origin is listed, so this one is not: its preflight is refused like any unlisted origin's.
  if (grant === null) return isPreflight(c.req.raw) ? refused(origin) : next();
  const method = c.req.method;

  // A preflight: answered here, before any route (none is declared for OPTIONS) or budget.
  const preflight = preflightAnswer(c.req.raw, grant, origin, path);
  if (preflight) return preflight;

  // A WebSocket from a page: no preflight protects it, so the origin is checked here. A Pusher
  // connection under `*` may open, public reads only (its route reads `publicReadsOnly`).
  const upgrade = (c.req.header("upgrade") ?? "").toLowerCase() === "websocket";
  if (upgrade) {
    const ok = grant === "listed" || (grant === "public" && (path.startsWith("/app/") || isPublicRead(method, path)));
    if (!ok) return refused(origin);
    return next();
  }

  await next();
  allowOn(c.res.headers, grant, origin, !!c.req.header("authorization"), method, path);
});

/** A preflight: `OPTIONS` with an `Access-Control-Request-Method`. */
function isPreflight(req: Request): boolean {
  return req.method === "OPTIONS" && !!req.headers.get("access-control-request-method");
}

/** The answer to a preflight, or null for any other request. */
function preflightAnswer(req: Request, grant: Grant, origin: string, path: string): Response | null {
  if (!isPreflight(req)) return null;
  const requested = req.headers.get("access-control-request-method") as string;
  const withAuth = (req.headers.get("access-control-request-headers") ?? "").toLowerCase().includes("authorization");
  const ok = grant === "listed" || (grant === "public" && !withAuth && isPublicRead(requested, path));
  if (!ok) return refused(origin);
  return new Response(null, {
    status: 204,
    headers: {
      "Access-Control-Allow-Origin": grant === "listed" ? origin : "*",
      "Access-Control-Allow-Methods": grant === "listed" ? ALLOW_METHODS : "GET",
      "Access-Control-Allow-Headers": ALLOW_HEADERS,
      "Access-Control-Max-Age": String(MAX_AGE_S),
      Vary: "Origin",
    },
  });
}

/** Sets what an answer to `origin` carries: `Vary: Origin` always, and the grant's allow and expose headers. */
function allowOn(
  headers: Headers,
  grant: Grant,
  origin: string,
  withAuth: boolean,
  method: string,
  path: string,
): void {
  headers.append("Vary", "Origin");
  const allow =
    grant === "listed" ? origin : grant === "public" && !withAuth && isPublicRead(method, path) ? "*" : null;
  if (allow === null) return;
  headers.set("Access-Control-Allow-Origin", allow);
  headers.set("Access-Control-Expose-Headers", EXPOSE_HEADERS);
}

/**
 * CORS for a deployment with invalid configuration, whose every answer is a 500 naming the bad
 * variable (`res`): it is made before the settings exist, so `CORS_ORIGINS` is read on its own here.
 * A preflight is answered as usual and `res` gets its CORS headers, so a page of a listed origin
 * reads what is wrong instead of a bare CORS failure in its console. A `CORS_ORIGINS` that is itself
 * invalid allows no origin.
 */
export function corsOnConfigError(req: Request, raw: RawConfig, res: Response): Response {
  const origin = req.headers.get("origin");
  const { pathname } = new URL(req.url);
  if (!origin || !inScope(pathname)) return res;
  let settings: CorsOrigins;
  try {
    settings = corsOrigins(raw);
  } catch {
    return res;
  }
  const grant = grantOf(settings, origin);
  if (grant === null) return isPreflight(req) ? refused(origin) : res;
  const preflight = preflightAnswer(req, grant, origin, pathname);
  if (preflight) return preflight;
  allowOn(res.headers, grant, origin, req.headers.has("authorization"), req.method, pathname);
  return res;
}

function refused(origin: string): Response {
  return apiErrorResponse(permissionDenied(`origin ${origin} may not call this API from a browser (CORS_ORIGINS)`));
}
