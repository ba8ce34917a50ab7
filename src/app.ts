/**
 * The Hono app: per-isolate services and config check for every request, the route sub-apps, and
 * the contract's error shape for every failure, unknown routes included.
 */
import { Hono } from "hono";
import { secureHeaders } from "hono/secure-headers";
import type { AppEnv } from "./app-env";
import { ConfigError } from "./config";
import { ApiError, errorResponse } from "./errors";
import { dashboard } from "./routes/dashboard";
import { operator } from "./routes/operator";
import { publish } from "./routes/publish";
import { history, subscribe } from "./routes/subscribe";
import { tokens } from "./routes/tokens";
import { services } from "./services";

export const app = new Hono<AppEnv>();

/**
 * Security headers on every API answer, errors included (docs/security.md, "Headers"). The API only
 * serves JSON, event streams and WebSockets, so its CSP allows nothing to load and no page to frame it.
 * The dashboard's files are served by the assets layer before the Worker runs; their headers are in
 * public/_headers. Cross-Origin-Resource-Policy is left out: it would block other sites' no-cors reads
 * and adds nothing to CORS-mode fetches of the JSON API.
 */
app.use(
  "*",
  secureHeaders({
    contentSecurityPolicy: { defaultSrc: ["'none'"], frameAncestors: ["'none'"] },
    xFrameOptions: "DENY",
    crossOriginResourcePolicy: false,
  }),
);

app.use("*", async (c, next) => {
  let svc: ReturnType<typeof services>;
  try {
    svc = services(c.env);
    c.set("svc", svc);
  } catch (e) {
    if (e instanceof ConfigError) {
      // Fail closed: a typo never silently disables a rule. The message names the variable.
      console.error(`floodgate: ${e.message}`);
      throw new ApiError("internal", e.message, { variable: e.variable });
    }
    throw e;
  }
  await next();
  // Every request, denied ones included, makes sure its counts reach the metrics object soon.
  svc.metrics.schedule((p) => c.executionCtx.waitUntil(p));
});

app.route("/v1/tokens", tokens);
app.route("/v1/publish", publish);
app.route("/v1/subscribe", subscribe);
app.route("/v1/history", history);
app.route("/", operator);
app.route("/", dashboard);

app.notFound(() => new ApiError("not_found", "no such route").toResponse());
app.onError((err) => errorResponse(err));
