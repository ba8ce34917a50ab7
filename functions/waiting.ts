/**
 * Waiting on work another request does, the workerd way.
 *
 * workerd ties I/O to the request that started it, and code that continues from a promise another
 * request resolved runs in *that* request's context: it then cannot touch its own timers or build its
 * own response ("Cannot perform I/O on behalf of a different request"), and if that request ends, it
 * never runs at all. So a request never awaits a promise another request settles. It checks shared
 * state on timers of its own instead — a timer's callback always runs in the request that set it.
 * (Having the other request resolve a promise the waiter created, which the default
 * `handle_cross_request_promise_resolution` flag is meant to route back to the waiter, works at
 * first and then fails under sustained load: scripts/repro/cross-request-wake.mjs.)
 */

/**
 * Checks after 0, 1, 1, 1, … ms: never more than 1 ms late. A delivered publish to a channel with one
 * subscriber spends much of its time waiting on its batch and the batch ahead: with checks backing
 * off to 2 ms it ran at 0.72 of this, using 1.05× the CPU (docs/benchmarks.md, "Where the time goes").
 */
const MAX_STEP_MS = 1;

/**
 * Resolves true once `ready()` holds, or false after waiting at least `timeoutMs` (by the sum of its
 * own timer delays or by the clock, whichever is first; both move with fake timers). Only this
 * request's timers are involved, so whatever follows runs in this request's context.
 */
export async function pollUntil(ready: () => boolean, timeoutMs: number): Promise<boolean> {
  const start = Date.now();
  let waited = 0;
  let step = 0;
  while (!ready()) {
    // Also by the clock: timers a busy isolate runs late would otherwise stretch the wait, 1 ms
    // credited for each however late it ran.
    if (waited >= timeoutMs || Date.now() - start >= timeoutMs) return false;
    await new Promise<void>((r) => setTimeout(r, step));
    waited += Math.max(step, 0.25); // a 0 ms timer still takes a turn of the event loop
    step = MAX_STEP_MS;
  }
  return true;
}
