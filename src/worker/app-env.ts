/**
 * Hono's environment for every route: the Worker's bindings, the per-isolate services, and `defer`,
 * which hands a promise to the request's `waitUntil` (work that outlives the response).
 */
import type { Services } from "./services";

export type AppEnv = {
  Bindings: Env;
  Variables: { svc: Services; defer: (p: Promise<unknown>) => void };
};
