/**
 * Floodgate's Worker entry: the HTTP API (Hono) and the Durable Object classes.
 */
import { app } from "./app";

export { ChannelObject } from "./channel-object";
export { MetricsStore } from "./metrics";
export { RateLimiter } from "./rate-limiter";
export { RefreshLedger } from "./refresh-ledger";

export default {
  fetch: app.fetch,
} satisfies ExportedHandler<Env>;
