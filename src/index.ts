/**
 * Floodgate's Worker entry: the HTTP API (Hono), the sampler's Cron Trigger, and the Durable Object
 * classes.
 */
import { app } from "./worker/app";
import { consumeDeadLetters, consumeDrops, DEAD_LETTER_QUEUE } from "./worker/record/record-queue";
import { sweepRecord } from "./worker/record/record-retention";
import { runSampler } from "./worker/sampler/sampler-run";
import { services } from "./worker/services";

export { ActiveChannels } from "./active-channels/active-channels";
export { ChannelObject } from "./channel/channel-object";
export { ConnectionHost } from "./connection-host/connection-host";
export { ConnectionLedger } from "./connection-ledger/connection-ledger";
export { HostDirectory } from "./host-directory/host-directory";
export { LimiterShard } from "./limiter/limiter-shard";
export { MetricsStore } from "./metrics/metrics-store";
export { RefreshLedger } from "./refresh-ledger/refresh-ledger";
export { Relay } from "./relay/relay";
export { Publisher } from "./worker/pusher/publisher";

export default {
  fetch: app.fetch,

  /**
   * The drops queue and its dead-letter queue (wrangler.toml), both consumed here: the record of
   * dropped messages (src/worker/record/record-queue.ts).
   */
  async queue(batch, env, ctx) {
    if (batch.queue === DEAD_LETTER_QUEUE) await consumeDeadLetters(batch, env, ctx);
    else await consumeDrops(batch, env, ctx);
  },

  /**
   * The sampler (docs/throttling.md): every minute in production; see wrangler.toml `[triggers]`. It measures
   * with real time, not `controller.scheduledTime`: a late run must measure the period it really covered.
   */
  async scheduled(_controller, env, ctx) {
    // Invalid configuration throws here too (fail closed): the run is logged as failed, nothing written.
    const svc = services(env);
    const run = runSampler(env, svc.config, Date.now(), svc.reader).then((report) => {
      if (report.channels.length === 0) return;
      const changed = report.channels.filter((c) => "written" in c && (c.written || c.deleted)).length;
      const failed = report.channels.filter((c) => "error" in c).length;
      console.log(
        `floodgate sampler: ${report.channels.length} channels visited, ${changed} rates written or released, ${failed} failed, ${report.deferred} left for the next run`,
      );
    });
    // The record's retention is a step of its own: neither waits on nor fails with the other.
    const sweep = sweepRecord(env, svc, Date.now()).then(
      (r) => {
        if (r.deleted > 0) console.log(`floodgate record: ${r.deleted} expired objects deleted (${r.copies} copies)`);
      },
      (e) => console.error("floodgate record: retention sweep failed", e instanceof Error ? e.message : e),
    );
    ctx.waitUntil(run);
    ctx.waitUntil(sweep);
    await Promise.allSettled([run, sweep]);
    await run;
  },
} satisfies ExportedHandler<Env>;
