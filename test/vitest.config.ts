import { fileURLToPath } from "node:url";
import { cloudflareTest } from "@cloudflare/vitest-plugin";
import { defineConfig, defineProject } from "vitest/config";

const root = fileURLToPath(new URL("..", import.meta.url));

// Test-only secrets; production has none (see README "Deploy"). Also put in this process's
// environment, where wrangler looks for the `[secrets] required` names, so it does not warn about
// missing secrets once per test file.
const TEST_SECRETS = {
  TOKEN_SECRET: "test-token-secret-0123456789abcdef",
  ADMIN_TOKEN: "test-admin-token",
  PUSHER_APP_SECRET: "test-pusher-secret-0123",
};
Object.assign(process.env, TEST_SECRETS);

/**
 * Two projects, both run by `npm test`: `workerd`, every test inside workerd through the Workers pool;
 * `libraries`, the tests that drive Floodgate with the published Pusher libraries (pusher-js, pusher,
 * laravel-echo) as their users do, from Node over real sockets, against a Floodgate started in its
 * own workerd (test/pusher-libraries/global-setup.ts).
 */
export default defineConfig({
  test: { projects: [workerd(), libraries()], onUnhandledError: notTeardownOfWorkAfterItsFile },
});

/**
 * Every unhandled error fails the run but one, which is the pool's, not Floodgate's: when a test file
 * ends, the pool closes the channel its module loads go through, and work the runtime still runs for
 * that file (a relay reporting its counts or telling a connection ledger after a socket the test
 * closed, an alarm, a queue batch) is refused its next module with `EnvironmentTeardownError: Closing
 * rpc while "resolve" was pending`. Floodgate's code handles that refusal where it makes the call (the
 * relay logs "could not report counts"); what reaches vitest is the pool's own rejected module load.
 * The tests that left such work behind in shuffled orders (seed 804430104: a relay's reports and
 * ledger tells after a test's last closes) now wait for it before they end
 * (test/support/closes-told.ts). The filter stays as the guard for orders not tried yet; to see what
 * it lets through, make it return true and look for "Closing rpc" in the output.
 */
function notTeardownOfWorkAfterItsFile(error: { name?: string; message?: string }): boolean {
  return !(
    error.name === "EnvironmentTeardownError" &&
    /^\[vitest-worker\]: Closing rpc while "\w+" was pending$/.test(error.message ?? "")
  );
}

function libraries() {
  return defineProject({
    root,
    test: {
      name: "libraries",
      include: ["test/pusher-libraries/**/*.test.ts"],
      environment: "node",
      globalSetup: ["test/pusher-libraries/global-setup.ts"],
      testTimeout: 30_000,
      hookTimeout: 120_000,
    },
  });
}

function workerd() {
  return defineProject({
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
            // Summaries of drops (test/channel/drop-summaries.test.ts, whose manifest test lists these rules,
            // and the two Pusher tests named below). The interval is long, so no summary is sent by
            // itself: a test makes the open interval due now and runs the alarm.
            THROTTLE_SUMMARY: JSON.stringify({
              "public:summary.**": "/emoji",
              "public:summary.deep.*": "/a/b/0",
              // test/connection-host/both-doors.test.ts: a Pusher event's data read through /data/.
              "pusher:summary.**": "/data/emoji",
              // test/connection-host/client-events.test.ts: a dropped client event's key.
              "pusher:private-summary.**": "/data/emoji",
            }),
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
            // The Pusher door, open for test/connection-host/ and test/worker/pusher/ (test/support/pusher.ts).
            PUSHER_APP_ID: "test-app",
            PUSHER_APP_KEY: "test-key",
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
      name: "workerd",
      include: ["test/**/*.test.ts"],
      exclude: ["test/pusher-libraries/**"],
      setupFiles: ["test/setup.ts"],
      testTimeout: 20_000,
      hookTimeout: 30_000,
    },
  });
}
