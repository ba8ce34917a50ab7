// How a checking script (test:start, test:connections, test:browser, check:docs, …) reports: one
// line per check, `ok` or `FAIL`, a count of the failures, and a last line and exit code that follow
// from that count, so every script says the same thing the same way and CI reads only the exit code.
// Each script is its own process, so the count is simply this module's.

let failures = 0;

/** Prints one check's line, `ok` or `FAIL`, counts a failure, and returns `ok`. */
export function check(ok, what) {
  console.log(`${ok ? "ok  " : "FAIL"} ${what}`);
  if (!ok) failures++;
  return ok;
}

/** A check that passed: its `ok` line. */
export const pass = (what) => check(true, what);

/** A check that failed, or a step that threw: its `FAIL` line, counted. */
export const fail = (what) => check(false, what);

/**
 * Ends the script: prints `<script>: all passed` or `<script>: N failed` (with `note` in parentheses
 * when given) and exits 0, or 1 when any check failed.
 */
export function finish(script, note) {
  console.log(`${script}: ${failures ? `${failures} failed` : "all passed"}${note ? ` (${note})` : ""}`);
  process.exit(failures ? 1 : 0);
}
