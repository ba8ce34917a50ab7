/**
 * The Hono app: per-isolate services and config check for every request, the route sub-apps, and
 * the contract's error shape for every failure, unknown routes included.
 */
import { Hono } from "hono";
import type { AppEnv } from "./app-env";
import { ConfigError } from "./config";
import { ApiError, errorResponse } from "./errors";
import { operator } from "./routes/operator";
import { publish } from "./routes/publish";
import { history, subscribe } from "./routes/subscribe";
import { tokens } from "./routes/tokens";
import { services } from "./services";

export const app = new Hono<AppEnv>();

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

app.notFound(() => new ApiError("not_found", "no such route").toResponse());
app.onError((err) => errorResponse(err));
