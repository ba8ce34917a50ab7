/**
 * Letting go of an object's answer once it is read. Every object a call answers comes with a
 * disposer, and Cloudflare's RPC lifecycle asks the caller to call it rather than leave it to the
 * garbage collector: until then the callee may hold the call open. An answer a Durable Object builds
 * itself holds nothing open, but one that code on the way passed on from a call of its own does —
 * as the dev registry's proxy passes every answer of an object in another workerd process — and
 * workerd prints "An RPC result was not disposed properly" when such an answer is collected
 * undisposed (`bench:reads --split`; scripts/repro/rpc-result-across-processes.mjs).
 */

/** `Symbol.dispose`: workerd has it, TypeScript's ES2023 lib (the one tsconfig.json names) does not. */
const DISPOSE = (Symbol as unknown as { dispose: symbol }).dispose;

/** Disposes `result` (an object's answer, once its data is read) and returns it; its data stays. */
export function released<T>(result: T): T {
  if (typeof result === "object" && result !== null) {
    const dispose = (result as Record<symbol, unknown>)[DISPOSE];
    if (typeof dispose === "function") dispose.call(result);
  }
  return result;
}
