/**
 * Runs before every test file (vitest `setupFiles`). Each test starts with fresh per-isolate state:
 * tests share one isolate and write KV and object storage directly, so a cache filled by one test
 * (a global drop rate of 1, say) must not decide the next test's outcome depending on how fast the
 * machine runs.
 */
import { beforeEach } from "vitest";
import { forgetServices } from "../src/worker/services";

beforeEach(() => {
  forgetServices();
});
