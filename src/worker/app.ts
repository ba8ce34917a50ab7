/**
 * The Hono app: per-isolate services and config check for every request, the route sub-apps, and
 * the API's error shape (docs/api.md) for every failure, unknown routes included.
 */
import { Hono } from "hono";
import { createMiddleware } from "hono/factory";
import * as z from "zod";
import { ConfigError, rawConfigFrom } from "../settings/settings";
import { ApiError } from "../wire/errors";
import type { AppEnv } from "./app-env";
import { adminAuth } from "./auth/authorise";
import { cors, corsOnConfigError } from "./http/cors";
import { apiErrorResponse, errorResponse } from "./http/errors";
import { documented, json, mount, openApiDocument, route } from "./http/openapi";
import { refusalReason } from "./http/refusals";
import { noSuchRoute } from "./http/route-hints";
import { securityHeaders } from "./http/security-headers";
import { pusherAuth } from "./pusher/auth-route";
import { pusherConnect } from "./pusher/connect";
import { pusherApi } from "./pusher/http-api";
import { admin } from "./routes/admin";
import { adminTargets } from "./routes/admin-targets";
import { dashboard } from "./routes/dashboard";
import { history } from "./routes/history";
import { manifestRoutes } from "./routes/manifest";
import { ops } from "./routes/ops";
import { presence } from "./routes/presence";
import { publish } from "./routes/publish";
import { subscribe } from "./routes/subscribe";
import { tokens } from "./routes/tokens";
import { type Services, services } from "./services";

export const app = new Hono<AppEnv>();

/** Security headers on every API answer, errors included (src/worker/http/security-headers.ts). */
app.use("*", securityHeaders);

/**
 * Per-isolate services (config checked) and `defer` for every request. Fail closed: a config typo
 * never silently disables a rule; the 500 names the variable.
 */
const withServices = createMiddleware<AppEnv>(async (c, next) => {
  let svc: Services;
  try {
    svc = services(c.env);
  } catch (e) {
    if (e instanceof ConfigError) {
      console.error(`floodgate: ${e.message}`);
      const res = apiErrorResponse(new ApiError("internal", e.message, { variable: e.variable }));
      // The cors middleware below needs the settings: this answer gets its CORS headers here.
      return corsOnConfigError(c.req.raw, rawConfigFrom(c.env), res);
    }
    throw e;
  }
  const defer = (p: Promise<unknown>) => c.executionCtx.waitUntil(p);
  c.set("svc", svc);
  c.set("defer", defer);
  await next();
  const refused = refusalReason(c.res);
  if (refused !== null) svc.metrics.inc("floodgate_refusals_total", { reason: refused });
  // Every request, denied ones included, makes sure its counts reach the metrics object soon.
  svc.metrics.schedule(defer);
});

app.use("*", withServices);

/** Browsers on other origins (src/worker/http/cors.ts): after the services, which hold `CORS_ORIGINS`. */
app.use("*", cors);

mount(app, "/v1/tokens", tokens);
mount(app, "/v1/publish", publish);
mount(app, "/v1/subscribe", subscribe);
mount(app, "/v1/history", history);
mount(app, "/v1/presence", presence);
// The Pusher door (docs/api.md, "The Pusher door"): connections.
mount(app, "/app", pusherConnect);
mount(app, "/apps", pusherApi);
mount(app, "/v1/pusher", pusherAuth);
/**
 * The admin area: every route under `/v1/admin` behind the admin bearer, checked once per request
 * (a middleware of each sub-app mounted here would run for every route under the prefix, each
 * charging and refunding the admin-auth budget again).
 */
const adminArea = new Hono<AppEnv>();
adminArea.use("*", adminAuth);
mount(adminArea, "/", admin);
mount(adminArea, "/", adminTargets);
mount(adminArea, "/", dashboard);
mount(app, "/v1/admin", adminArea);
mount(app, "/", ops);
mount(app, "/", manifestRoutes);

const openApiRoute = route({
  method: "get",
  path: "/v1/openapi.json",
  summary: "This OpenAPI 3.1 document",
  description: "The API reference page of a deployment renders it at /docs/api.",
  responses: { 200: json(z.looseObject({ openapi: z.literal("3.1.0") }), "The document.") },
});

/** Built on first use: it depends only on the routes, which never change while the isolate lives. */
let document: ReturnType<typeof openApiDocument> | null = null;
app.get(documented(app, openApiRoute), (c) => {
  document ??= openApiDocument(app);
  return c.json(document);
});

app.notFound((c) =>
  apiErrorResponse(new ApiError("not_found", noSuchRoute(app as unknown as Hono<never>, c.req.method, c.req.path))),
);
app.onError((err) => errorResponse(err));
