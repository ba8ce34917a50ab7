#!/usr/bin/env node
// `npm run test:stress [-- --runs N]`: the whole suite N times in a row (default 10) while the
// machine is busy, to catch tests that pass only when they run fast or in the usual order.
// - One CPU-burning child per core runs for the whole stress, so every run is slow and timers fire
//   late, the way they do on a loaded CI machine.
// - Every second run passes vitest `--sequence.shuffle` with a seed printed beside the result, so an
//   order-dependent failure can be replayed: `npm test -- --sequence.shuffle --sequence.seed=<seed>`.
// Prints `N/N passed` at the end and exits non-zero when any run failed.
import { spawn } from "node:child_process";
import { mkdirSync, writeFileSync } from "node:fs";
import { availableParallelism } from "node:os";
import { join } from "node:path";
import { options } from "./lib/options.mjs";

const values = options(
  "test:stress",
  { runs: 10, "no-burn": false },
  {
    positionals: true,
    help: `usage: npm run test:stress -- [--runs N] [--no-burn] [test files or name filters]
  --runs N     how many runs of the whole suite (default 10); half of them shuffled
  --no-burn    do not start the CPU-burning children (one per core)`,
  },
);
const filters = values.positionals;
const runs = values.runs;
if (!Number.isInteger(runs) || runs < 1) {
  console.error(`test:stress: --runs must be a positive whole number, not ${JSON.stringify(values.runs)}`);
  process.exit(2);
}

const burners = values["no-burn"]
  ? []
  : Array.from({ length: availableParallelism() }, () =>
      spawn(process.execPath, ["-e", "for (;;) {}"], { stdio: "ignore" }),
    );
const stopBurners = () => {
  for (const b of burners) b.kill("SIGKILL");
};
process.on("exit", stopBurners);
for (const sig of ["SIGINT", "SIGTERM"]) {
  process.on(sig, () => {
    stopBurners();
    process.exit(130);
  });
}

/** One run of the suite; resolves with its exit code and the summary lines vitest printed. */
function runSuite(args) {
  return new Promise((resolve) => {
    const child = spawn(
      process.execPath,
      ["node_modules/vitest/vitest.mjs", "run", "--config", "test/vitest.config.ts", ...args],
      {
        stdio: ["ignore", "pipe", "pipe"],
        env: { ...process.env, FORCE_COLOR: "0", NO_COLOR: "1" },
      },
    );
    let out = "";
    child.stdout.on("data", (d) => {
      out += d;
    });
    child.stderr.on("data", (d) => {
      out += d;
    });
    child.on("close", (code) => resolve({ code: code ?? 1, out }));
  });
}

const started = Date.now();
let passed = 0;
for (let i = 1; i <= runs; i++) {
  const shuffled = i % 2 === 0;
  const seed = Math.floor(Math.random() * 1e9);
  const args = [...(shuffled ? ["--sequence.shuffle", `--sequence.seed=${seed}`] : []), ...filters];
  const t0 = Date.now();
  const { code, out } = await runSuite(args);
  const secs = ((Date.now() - t0) / 1000).toFixed(0);
  const summary = out.match(/^\s*Tests\s+.*$/m)?.[0].trim() ?? "no summary";
  const label = shuffled ? `shuffled, seed ${seed}` : "in order";
  if (code === 0) passed++;
  console.log(`run ${i}/${runs} (${label}): ${code === 0 ? "passed" : "FAILED"} in ${secs}s — ${summary}`);
  if (code !== 0) {
    // The whole output goes to a file; the failing tests and their first error lines are shown here.
    mkdirSync("test-artifacts", { recursive: true });
    const log = join("test-artifacts", `stress-run-${i}.log`);
    writeFileSync(log, out);
    const shown = out.split("\n").filter((l) => /^\s*(FAIL|×)|AssertionError|Test timed out/.test(l));
    for (const line of shown.slice(0, 20)) console.log(`    ${line.trim()}`);
    console.log(`    full output: ${log}`);
  }
}
const minutes = ((Date.now() - started) / 60_000).toFixed(1);
console.log(`${passed}/${runs} passed (${minutes} min, ${burners.length} CPU burners)`);
process.exit(passed === runs ? 0 : 1);
