/**
 * Floodgate's Worker entry: the HTTP API (Hono), the sampler's Cron Trigger, and the Durable Object
 * classes.
 */
import { app } from "./app";
import { runSampler } from "./sampler-run";
import { services } from "./services";

export { ActiveChannels } from "./active-channels";
export { ChannelObject } from "./channel-object";
export { LimiterShard } from "./limiter-shard";
export { MetricsStore } from "./metrics";
export { RateLimiter } from "./rate-limiter";
export { RefreshLedger } from "./refresh-ledger";
export { Relay } from "./relay";

export default {
  fetch: app.fetch,

  /**
   * The sampler (docs/throttling.md): every minute in production; see wrangler.toml `[triggers]`. It measures
   * with real time, not `controller.scheduledTime`: a late run must measure the period it really covered.
   */
  async scheduled(_controller, env, ctx) {
    // Invalid configuration throws here too (fail closed): the run is logged as failed, nothing written.
    const svc = services(env);
    const run = runSampler(env, svc.config, Date.now(), svc.reader).then((report) => {
      if (report.channels.length === 0) return;
      const changed = report.channels.filter((c) => "written" in c && c.written).length;
      const failed = report.channels.filter((c) => "error" in c).length;
      console.log(
        `floodgate sampler: ${report.channels.length} channels visited, ${changed} rates written, ${failed} failed, ${report.deferred} left for the next run`,
      );
    });
    ctx.waitUntil(run);
    await run;
  },
} satisfies ExportedHandler<Env>;
