#!/usr/bin/env node
// `npm run test:start`: bad configuration stops `npm start` — exit non-zero within 5 s with the
// Worker's one message naming the variable, and no server started (docs/operations.md, "Local
// development"). Runs `npm start -- --var PUBLISH_RATE:abc` (and one bad JSON rule) as a user would.
import { spawn } from "node:child_process";
import { join } from "node:path";
import { options } from "./lib/options.mjs";
import { root } from "./lib/root.mjs";

options("test:start", {});

const LIMIT_MS = 5_000;
let failures = 0;
function check(ok, what) {
  console.log(`${ok ? "ok  " : "FAIL"} ${what}`);
  if (!ok) failures++;
}

/** Runs `npm start -- …args` on a port nothing else uses; answers its exit code, output and time. */
function start(args) {
  return new Promise((resolve) => {
    const t0 = Date.now();
    const child = spawn("npm", ["start", "--", "--port", "8797", ...args], {
      cwd: root,
      env: { ...process.env, PATH: `${join(root, "node_modules", ".bin")}:${process.env.PATH}` },
      stdio: ["ignore", "pipe", "pipe"],
      detached: true,
    });
    let out = "";
    child.stdout.on("data", (d) => (out += d));
    child.stderr.on("data", (d) => (out += d));
    // Past twice the limit it is a failure anyway: end it (and its wrangler) rather than wait forever.
    const kill = setTimeout(() => {
      try {
        process.kill(-child.pid, "SIGTERM");
      } catch {}
    }, 2 * LIMIT_MS);
    child.on("exit", (code) => {
      clearTimeout(kill);
      resolve({ code, out, ms: Date.now() - t0 });
    });
  });
}

for (const [args, variable, says] of [
  [["--var", "PUBLISH_RATE:abc"], "PUBLISH_RATE", '"abc" is not a rate'],
  [["--var=THROTTLE_TARGETS:{not json"], "THROTTLE_TARGETS", "THROTTLE_TARGETS"],
]) {
  const { code, out, ms } = await start(args);
  const lines = out.split("\n").filter((l) => l.includes(`invalid configuration: ${variable}`));
  check(code !== 0 && code !== null, `npm start ${args.join(" ")} exits non-zero (${code})`);
  check(ms < LIMIT_MS, `… within ${LIMIT_MS / 1000} s (${(ms / 1000).toFixed(1)} s)`);
  check(
    lines.length === 1 && lines[0].includes(says),
    `… with the one message naming ${variable}: ${lines[0]?.trim()}`,
  );
  check(!/Ready on|local sampler runs/.test(out), "… and no server said Ready");
}
console.log(failures ? `test:start: ${failures} failed` : "test:start: all passed");
process.exit(failures ? 1 : 0);
