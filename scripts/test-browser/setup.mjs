// What every part of `npm run test:browser` shares: the Worker it starts (`npm start`'s way), the
// browser and the channels the checks publish to. A check reports through ../lib/checks.mjs.
import { existsSync } from "node:fs";
import { join } from "node:path";
import { chromium } from "playwright-core";
import { startDev } from "../lib/dev-server.mjs";
import { root } from "../lib/root.mjs";

// BROWSER_TEST_PORT / BROWSER_TEST_INSPECTOR_PORT: so two runs on one machine do not collide.
const PORT = Number(process.env.BROWSER_TEST_PORT ?? 8797);
const INSPECTOR_PORT = process.env.BROWSER_TEST_INSPECTOR_PORT;
export const BASE = `http://127.0.0.1:${PORT}`;
export const CHANNEL = "public:live.browser";
// No target: the sampler leaves its rate alone, so a rate set from the page stays set. (On CHANNEL the
// next sample, every 2 s here, would overwrite it, which made this check flaky.)
export const MANUAL = "public:live.manual";
const CHROMIUM = process.env.CHROMIUM_PATH ?? "/usr/bin/chromium";
/** Where the screenshots go. */
export const artifacts = join(root, "test-artifacts");

/** Stops the run when there is no Chromium to drive. */
export function requireChromium() {
  if (!existsSync(CHROMIUM)) {
    console.error(`test:browser: no Chromium at ${CHROMIUM}; install it with: apt-get install -y chromium`);
    process.exit(1);
  }
}

/** Chromium, headless. */
export function launchBrowser() {
  return chromium.launch({ executablePath: CHROMIUM, args: ["--headless", "--no-sandbox", "--disable-gpu"] });
}

/**
 * The Worker as `npm start` starts it, with a 5/s target on CHANNEL, a short rate cache and the local
 * sampler every 2 s, so a drop rate moves within the test's time.
 */
export function startServer() {
  return startDev({
    port: PORT,
    args: [
      "--var",
      `THROTTLE_TARGETS:${JSON.stringify({ [CHANNEL]: "5/s" })}`,
      "--var",
      "THROTTLE_RATE_CACHE_MS:200",
      ...(INSPECTOR_PORT ? ["--inspector-port", INSPECTOR_PORT] : []),
    ],
    env: { SAMPLER_LOCAL_PERIOD: "2" },
  });
}

/** Resolves to `fn()`'s first truthy answer, tried every 200 ms for up to `ms` (errors count as no). */
export async function waitFor(fn, what, ms = 30_000) {
  const end = Date.now() + ms;
  for (;;) {
    try {
      const v = await fn();
      if (v) return v;
    } catch {}
    if (Date.now() > end) throw new Error(`timed out: ${what}`);
    await new Promise((r) => setTimeout(r, 200));
  }
}
