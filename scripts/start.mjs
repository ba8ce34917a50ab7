#!/usr/bin/env node
// `npm start`: runs `wrangler dev` with local KV and Durable Objects on a fixed port (8787).
// On a fresh clone it copies .dev.vars.example to .dev.vars (dev-only secrets) first.
// Arguments after `--` go to wrangler dev: `npm start -- --port 9000 --var X:Y`.
import { spawn } from "node:child_process";
import { copyFileSync, existsSync } from "node:fs";
import { dirname, join } from "node:path";
import { fileURLToPath } from "node:url";

const root = join(dirname(fileURLToPath(import.meta.url)), "..");
const devVars = join(root, ".dev.vars");
if (!existsSync(devVars)) {
  copyFileSync(join(root, ".dev.vars.example"), devVars);
  console.log("floodgate: created .dev.vars from .dev.vars.example (development secrets only)");
}

const args = process.argv.slice(2);
const hasPort = args.some((a) => a === "--port" || a.startsWith("--port="));
const wranglerArgs = ["dev", "--local", ...(hasPort ? [] : ["--port", "8787"]), "--test-scheduled", ...args];
const child = spawn(join(root, "node_modules", ".bin", "wrangler"), wranglerArgs, {
  cwd: root,
  stdio: "inherit",
  env: { WRANGLER_SEND_METRICS: "false", ...process.env },
});
for (const sig of ["SIGINT", "SIGTERM"]) process.on(sig, () => child.kill(sig));
child.on("exit", (code, signal) => process.exit(code ?? (signal ? 1 : 0)));
