#!/usr/bin/env node
// `npm start`: runs `wrangler dev` with local KV and Durable Objects on a fixed port (8787).
// On a fresh clone it copies .dev.vars.example to .dev.vars (dev-only secrets) first.
// Arguments after `--` go to wrangler dev: `npm start -- --port 9000 --var X:Y`.
// The sampler runs by itself every SAMPLER_LOCAL_PERIOD seconds (default 10; 0 turns it off): this
// script triggers the Worker's real `scheduled` handler through wrangler's --test-scheduled route,
// so what runs locally is exactly what the every-minute Cron Trigger runs in production.
import { spawn } from "node:child_process";
import { copyFileSync, existsSync } from "node:fs";
import { join } from "node:path";
import { configProblem, readDevVars, devVars as workerVars } from "./lib/dev-config.mjs";
import { root } from "./lib/root.mjs";

const devVars = join(root, ".dev.vars");
if (!existsSync(devVars)) {
  copyFileSync(join(root, ".dev.vars.example"), devVars);
  console.log("floodgate: created .dev.vars from .dev.vars.example (development secrets only)");
}

// The dashboard's vendored chart library (also done by npm install; cheap and idempotent).
await import("./build-assets.mjs");

const args = process.argv.slice(2);

// Bad configuration stops here with the Worker's own message, exit 1, before wrangler starts (a
// fraction of a second): the server never says Ready to refuse every request.
const problem = await configProblem(workerVars(args));
if (problem) {
  console.error(`floodgate: ${problem}`);
  console.error(
    "floodgate: not starting. Fix the variable (wrangler.toml [vars], .dev.vars or --var) and run npm start again.",
  );
  process.exit(1);
}
const hasPort = args.some((a) => a === "--port" || a.startsWith("--port="));
// wrangler dev loads from .dev.vars only the secrets wrangler.toml's `[secrets] required` lists, and the
// Pusher door's secret is not required (the door may stay closed, and deploy would demand it): a
// PUSHER_APP_SECRET in .dev.vars (.dev.vars.example's development one) is handed over as a --var.
const pusherSecret = readDevVars(devVars).PUSHER_APP_SECRET;
const given = args.some((a) => a.includes("PUSHER_APP_SECRET:"));
const secretArgs = pusherSecret && !given ? ["--var", `PUSHER_APP_SECRET:${pusherSecret}`] : [];
const wranglerArgs = [
  "dev",
  "--local",
  ...(hasPort ? [] : ["--port", "8787"]),
  "--test-scheduled",
  ...secretArgs,
  ...args,
];
const child = spawn(join(root, "node_modules", ".bin", "wrangler"), wranglerArgs, {
  cwd: root,
  stdio: "inherit",
  env: { WRANGLER_SEND_METRICS: "false", ...process.env },
});
for (const sig of ["SIGINT", "SIGTERM"]) process.on(sig, () => child.kill(sig));

const portArg = args.findIndex((a) => a === "--port" || a.startsWith("--port="));
const port = portArg < 0 ? 8787 : Number(args[portArg].includes("=") ? args[portArg].split("=")[1] : args[portArg + 1]);
const period = Number(process.env.SAMPLER_LOCAL_PERIOD ?? 10);
if (period > 0) {
  const runSampler = async () => {
    const res = await fetch(`http://127.0.0.1:${port}/__scheduled?cron=*+*+*+*+*`);
    await res.arrayBuffer();
    return res.ok;
  };
  /**
   * The Worker's own word on its configuration (/healthz answers 500 naming the variable), for what
   * the check above cannot see: a secret set another way, or .dev.vars edited while running (wrangler
   * reloads it). Null while healthy or not up yet.
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
  // The first run as soon as the server answers, then one every period. The first run marks the
  // start of the first sampling period: without it, a channel's first sample after a restart measured
  // its traffic over the time since the previous server's last run (the registry keeps that time in
  // local storage), understating the offered rate until the second run.
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
        if (await runSampler()) break;
      } catch {
        // The server is not up yet; try again shortly.
      }
      await new Promise((r) => setTimeout(r, 500));
    }
    if (stopped) return;
    console.log(`floodgate: local sampler runs every ${period}s (SAMPLER_LOCAL_PERIOD; 0 turns it off)`);
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
}
child.on("exit", (code, signal) => process.exit(process.exitCode || (code ?? (signal ? 1 : 0))));
