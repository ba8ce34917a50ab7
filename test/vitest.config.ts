import { fileURLToPath } from "node:url";
import { cloudflareTest } from "@cloudflare/vitest-plugin";
import { defineConfig } from "vitest/config";

const root = fileURLToPath(new URL("..", import.meta.url));

// Test-only secrets; production has none (see README "Deploy"). Also put in this process's
// environment, where wrangler looks for the `[secrets] required` names, so it does not warn about
// missing secrets once per test file.
const TEST_SECRETS = { TOKEN_SECRET: "test-token-secret-0123456789abcdef", ADMIN_TOKEN: "test-admin-token" };
Object.assign(process.env, TEST_SECRETS);

export default defineConfig({
  plugins: [
    cloudflareTest({
      wrangler: { configPath: `${root}wrangler.toml` },
      remoteBindings: false,
      miniflare: {
        bindings: {
          ...TEST_SECRETS,
          // Flush metrics at the end of every request so tests that wait on a request's waitUntil
          // do not wait a second each; the batching itself is tested with the shipped 1000 ms.
          METRICS_FLUSH_MS: "0",
          // Sampler targets for test/worker/sampler/cron-sweep.test.ts and (`public:fastloop.*`, 1/s:
          // periods of tens of seconds, so a few ms of test time do not move a measured rate)
          // test/channel/fast-loop-holds-target.test.ts only.
          THROTTLE_TARGETS: JSON.stringify({
            "public:sampled.**": "10/s",
            "public:budget.*": { deliveries: "40/s" },
            "public:fastloop.*": "1/s",
            "public:sharded.fast.*": "1/s",
          }),
          THROTTLE_THINNING: "public:sampled.thin.*,public:fastloop.*",
          // Summaries of drops for test/channel/drop-summaries.test.ts only. The interval is long, so no
          // summary is sent by itself: a test makes the open interval due now and runs the alarm.
          THROTTLE_SUMMARY: JSON.stringify({ "public:summary.**": "/emoji", "public:summary.deep.*": "/a/b/0" }),
          SUMMARY_INTERVAL: "1h",
          // Conflation for subscribers with ?max_rate= (test/relay/reader-conflation.test.ts only).
          CONFLATE_KEYS: JSON.stringify({ "public:conflate.**": "/match", "public:conflate.deep.*": "/a/0" }),
          // The fast loop's alarm never fires by itself during the suite: the fast-loop tests
          // (test/channel/fast-loop-holds-target.test.ts) end each period by moving its stored start back
          // and running the alarm (runDurableObjectAlarm).
          SAMPLER_FAST_PERIOD: "10m",
          // Audience shards for the tests in test/worker/shards/ and test/channel/shard-registry-storage.test.ts
          // only (`public:sharded.*`, `private:sharded.*.*` by the token's group; `public:geo.*` by continent;
          // `public:sharded.fast.*` also with a fast-loop target).
          AUDIENCE_SHARDS: JSON.stringify({
            "public:sharded.*": { by: "group" },
            "public:sharded.*.*": { by: "group" },
            "private:sharded.*.*": { by: "group" },
            "public:geo.*": { by: "continent" },
          }),
        },
      },
    }),
  ],
  root,
  // The tests use the client package by its name, from its source (its dist/ is built only to pack it).
  resolve: { alias: { "@floodgate/client": `${root}packages/client/src/index.ts` } },
  test: {
    include: ["test/**/*.test.ts"],
    setupFiles: ["test/setup.ts"],
    testTimeout: 20_000,
    hookTimeout: 30_000,
  },
});
