import type { Services } from "./services";

/** Hono's environment for every route: the Worker's bindings and the per-isolate services. */
export type AppEnv = { Bindings: Env; Variables: { svc: Services } };
