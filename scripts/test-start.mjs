#!/usr/bin/env node
// `npm run test:start`: what `npm start` says and refuses (docs/operations.md, "Local development").
// - Bad configuration stops it: exit non-zero within 5 s with the Worker's one message naming the
//   variable, and no server started (`--var PUBLISH_RATE:abc`, and one bad JSON rule), as a user would.
// - A good start prints the settings in force (a --var target among them), warns about a variable
//   name Floodgate does not read naming the nearest one, says it is ready, and is quiet: no bindings
//   table, no line per request, no stack trace when offline.
// - A second `npm start` on the same local state is refused with a message naming the first.
import { spawn } from "node:child_process";
import { mkdtempSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { check, finish } from "./lib/checks.mjs";
import { options } from "./lib/options.mjs";
import { root } from "./lib/root.mjs";

options("test:start", {});

const LIMIT_MS = 5_000;

/**
 * Starts `npm start -- …args` (port 8797 unless `args` names one). `exited` resolves with its exit
 * code, output and time; `output()` is what it printed so far; `stop()` ends it and its wrangler.
 */
function start(args, limitMs = 2 * LIMIT_MS) {
  const t0 = Date.now();
  const port = args.includes("--port") ? [] : ["--port", "8797"];
  const child = spawn("npm", ["start", "--", ...port, ...args], {
    cwd: root,
    env: { ...process.env, PATH: `${join(root, "node_modules", ".bin")}:${process.env.PATH}` },
    stdio: ["ignore", "pipe", "pipe"],
    detached: true,
  });
  let out = "";
  child.stdout.on("data", (d) => (out += d));
  child.stderr.on("data", (d) => (out += d));
  const stop = () => {
    try {
      process.kill(-child.pid, "SIGTERM");
    } catch {}
  };
  // Past its limit it is a failure anyway: end it (and its wrangler) rather than wait forever.
  const kill = setTimeout(stop, limitMs);
  const exited = new Promise((resolve) =>
    child.on("exit", (code) => {
      clearTimeout(kill);
      resolve({ code, out, ms: Date.now() - t0 });
    }),
  );
  return { exited, output: () => out, stop };
}

/** Resolves once `server` printed `text` (or after `ms`). */
async function printed(server, text, ms = 60_000) {
  const end = Date.now() + ms;
  while (!server.output().includes(text) && Date.now() < end) await new Promise((r) => setTimeout(r, 200));
  return server.output().includes(text);
}

for (const [args, variable, says] of [
  [["--var", "PUBLISH_RATE:abc"], "PUBLISH_RATE", '"abc" is not a rate'],
  [["--var=THROTTLE_TARGETS:{not json"], "THROTTLE_TARGETS", "THROTTLE_TARGETS"],
]) {
  const { code, out, ms } = await start(args).exited;
  const lines = out.split("\n").filter((l) => l.includes(`invalid configuration: ${variable}`));
  check(code !== 0 && code !== null, `npm start ${args.join(" ")} exits non-zero (${code})`);
  check(ms < LIMIT_MS, `… within ${LIMIT_MS / 1000} s (${(ms / 1000).toFixed(1)} s)`);
  check(
    lines.length === 1 && lines[0].includes(says),
    `… with the one message naming ${variable}: ${lines[0]?.trim()}`,
  );
  check(!/ready on|local sampler runs/i.test(out), "… and no server said ready");
}

const state = mkdtempSync(join(tmpdir(), "floodgate-start-"));
const server = start(
  ["--persist-to", state, "--var", "THROTTLE_TARGET:20/s", "--var", "THROTTLE_TARGTE:30/s"],
  120_000,
);
try {
  const up = await printed(server, "local sampler runs");
  check(up, "npm start says it is ready and the local sampler runs");
  // A request, so a line per request would show if there were one.
  await fetch("http://127.0.0.1:8797/v1/manifest").then((r) => r.arrayBuffer());
  const second = await start(["--port", "8798", "--persist-to", state]).exited;
  const out = server.output();
  check(
    /settings in force/.test(out) && /throttle +target 20\/s/.test(out) && /Pusher +door (open|closed)/.test(out),
    `… prints the settings in force, the --var target among them: ${out
      .split("\n")
      .find((l) => l.includes("target"))
      ?.trim()}`,
  );
  check(
    out.includes("THROTTLE_TARGTE") && out.includes("did you mean THROTTLE_TARGET?"),
    `… warns about a name it does not read: ${out
      .split("\n")
      .find((l) => l.includes("THROTTLE_TARGTE"))
      ?.trim()}`,
  );
  check(
    !/following bindings|GET \/v1\/manifest|ENOTFOUND|Unable to fetch/.test(out),
    "… and is quiet: no bindings table, no line per request, no offline stack trace",
  );
  check(
    second.code === 1 && /another npm start \(pid \d+, http:\/\/localhost:8797\)/.test(second.out),
    `a second npm start on the same state is refused: ${second.out
      .split("\n")
      .find((l) => l.includes("another npm start"))
      ?.trim()}`,
  );
  check(second.ms < LIMIT_MS, `… within ${LIMIT_MS / 1000} s (${(second.ms / 1000).toFixed(1)} s)`);
} finally {
  server.stop();
  await server.exited;
}

finish("test:start");
