/**
 * Floodgate's Worker entry: the HTTP API (Hono), the sampler's Cron Trigger, and the Durable Object
 * classes.
 */
import { app } from "./http/app";
import { services } from "./platform/services";
import { runSampler } from "./throttle/sampler-run";

export { RefreshLedger } from "./auth/refresh-ledger";
export { ChannelObject } from "./channel/channel-object";
export { Relay } from "./delivery/relay";
export { MetricsStore } from "./platform/metrics";
export { LimiterShard } from "./rate-limit/limiter-shard";
export { ActiveChannels } from "./throttle/active-channels";

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
