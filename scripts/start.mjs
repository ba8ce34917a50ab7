#!/usr/bin/env node
// `npm start`: runs `wrangler dev` with local KV and Durable Objects on a fixed port (8787).
// On a fresh clone it copies .dev.vars.example to .dev.vars (dev-only secrets) first.
// Arguments after `--` go to wrangler dev: `npm start -- --port 9000 --var X:Y`; `--log-requests`
// (ours) shows a line per request and the Worker's own log lines, which are quiet by default.
// Before it serves it prints the settings in force and warns about a variable name Floodgate does
// not read; a second `npm start` on the same local state is refused (it would share .wrangler's
// SQLite files with the first).
// The sampler runs by itself every SAMPLER_LOCAL_PERIOD seconds (default 10; 0 turns it off): this
// script triggers the Worker's real `scheduled` handler through wrangler's --test-scheduled route,
// so what runs locally is exactly what the every-minute Cron Trigger runs in production.
import { spawn } from "node:child_process";
import { copyFileSync, existsSync } from "node:fs";
import { join } from "node:path";
import { checkConfig, knownVariables, readDevVars, varsFromArgs, devVars as workerVars } from "./lib/dev-config.mjs";
import { root } from "./lib/root.mjs";
import { holdStateLock } from "./lib/start-lock.mjs";
import { settingsReport, unknownVarWarnings } from "./lib/start-report.mjs";

const devVars = join(root, ".dev.vars");
if (!existsSync(devVars)) {
  copyFileSync(join(root, ".dev.vars.example"), devVars);
  console.log("floodgate: created .dev.vars from .dev.vars.example (development secrets only)");
}

// The dashboard's vendored chart library (also done by npm install; cheap and idempotent).
await import("./build-assets.mjs");

const given = process.argv.slice(2);
const logRequests = given.includes("--log-requests");
const args = given.filter((a) => a !== "--log-requests");

// Bad configuration stops here with the Worker's own message, exit 1, before wrangler starts (a
// fraction of a second): the server never says Ready to refuse every request.
const { problem, settings } = await checkConfig(workerVars(args));
if (problem) {
  console.error(`floodgate: ${problem}`);
  console.error(
    "floodgate: not starting. Fix the variable (wrangler.toml [vars], .dev.vars or --var) and run npm start again.",
  );
  process.exit(1);
}
const portArg = args.findIndex((a) => a === "--port" || a.startsWith("--port="));
const port = portArg < 0 ? 8787 : Number(args[portArg].includes("=") ? args[portArg].split("=")[1] : args[portArg + 1]);
const persistArg = args.findIndex((a) => a === "--persist-to" || a.startsWith("--persist-to="));
const stateDir =
  persistArg < 0
    ? join(root, ".wrangler", "state")
    : args[persistArg].includes("=")
      ? args[persistArg].split("=")[1]
      : args[persistArg + 1];
// One server per local state: a second one would share its SQLite files (SQLITE_BUSY) or, on the
// same port, report a sampler that talks to the first.
const lock = holdStateLock(stateDir, port);
if (!lock.held) {
  console.error(`floodgate: ${lock.reason}`);
  process.exit(1);
}

// A name Floodgate does not read is a typo until proven otherwise: `THROTTLE_TARGTE:20/s` would start
// and never throttle. Said, not refused: a variable for another Worker sharing .dev.vars is fine.
const known = await knownVariables();
const named = [
  ...Object.keys(readDevVars()).map((n) => [n, ".dev.vars"]),
  ...Object.keys(varsFromArgs(args).vars).map((n) => [n, "--var"]),
];
for (const line of unknownVarWarnings(named, known)) console.warn(line);
if (settings) for (const line of settingsReport(settings)) console.log(line);

const hasPort = portArg >= 0;
const hasLogLevel = args.some((a) => a === "--log-level" || a.startsWith("--log-level="));
const wranglerArgs = [
  "dev",
  "--local",
  ...(hasPort ? [] : ["--port", "8787"]),
  "--test-scheduled",
  // Quiet by default: no bindings table (printed twice), no line per request; warnings and errors stay.
  ...(hasLogLevel ? [] : ["--log-level", logRequests ? "info" : "warn"]),
  ...args,
];
const child = spawn(join(root, "node_modules", ".bin", "wrangler"), wranglerArgs, {
  cwd: root,
  stdio: "inherit",
  // No request.cf download: offline it failed with a stack trace twice per start, and locally every
  // request comes from one placeholder place anyway (docs/operations.md, "Local development").
  env: { WRANGLER_SEND_METRICS: "false", CLOUDFLARE_CF_FETCH_ENABLED: "false", ...process.env },
});
for (const sig of ["SIGINT", "SIGTERM"]) process.on(sig, () => child.kill(sig));
child.on("exit", () => lock.release());
const period = Number(process.env.SAMPLER_LOCAL_PERIOD ?? 10);
const runSampler = async () => {
  const res = await fetch(`http://127.0.0.1:${port}/__scheduled?cron=*+*+*+*+*`);
  await res.arrayBuffer();
  return res.ok;
};
/**
 * The Worker's own word on its configuration (/healthz answers 500 naming the variable), for what
 * the check above cannot see: a secret set another way, or .dev.vars edited while running (wrangler
 * reloads it). Null while healthy, undefined while not up yet.
 */
const badConfiguration = async () => {
  const res = await fetch(`http://127.0.0.1:${port}/healthz`);
  if (res.ok) return null;
  const body = await res.json().catch(() => null);
  return body?.meta?.variable ? body.msg : null;
};
let reported = null;
/** Says a configuration problem once, not on every tick; answers whether there was one. */
const report = (problem) => {
  if (problem && problem !== reported) console.error(`floodgate: ${problem}`);
  reported = problem;
  return problem !== null;
};
let tick;
let stopped = false;
child.on("exit", () => {
  stopped = true;
  clearInterval(tick);
});
// Once the server answers: the ready line, and the sampler's first run at once, then one every
// period. The first run marks the start of the first sampling period: without it, a channel's first
// sample after a restart measured its traffic over the time since the previous server's last run
// (the registry keeps that time in local storage), understating the offered rate until the second run.
(async () => {
  while (!stopped) {
    try {
      if (report(await badConfiguration())) {
        // The server came up refusing every request: stop, with the message above, exit 1.
        console.error("floodgate: not starting. Fix the variable and run npm start again.");
        child.kill("SIGTERM");
        process.exitCode = 1;
        return;
      }
      if (period <= 0 || (await runSampler())) break;
    } catch {
      // The server is not up yet; try again shortly.
    }
    await new Promise((r) => setTimeout(r, 500));
  }
  if (stopped) return;
  console.log(`floodgate: ready on http://localhost:${port} — the dashboard at /, the API reference at /docs/api`);
  const requests = logRequests ? "" : "; request logs: npm start -- --log-requests";
  if (period <= 0) {
    console.log(`floodgate: local sampler off (SAMPLER_LOCAL_PERIOD=0)${requests}`);
    return;
  }
  console.log(`floodgate: local sampler runs every ${period}s (SAMPLER_LOCAL_PERIOD; 0 turns it off)${requests}`);
  tick = setInterval(async () => {
    try {
      // An edit that breaks the configuration is said once (the dashboard shows it as a banner);
      // the sampler waits until it is fixed.
      if (!report(await badConfiguration())) await runSampler();
    } catch {
      // The server is restarting after an edit; try again next tick.
    }
  }, period * 1000);
})();
child.on("exit", (code, signal) => process.exit(process.exitCode || (code ?? (signal ? 1 : 0))));
