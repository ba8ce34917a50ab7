/**
 * The coalescer lives in functions/coalescer.ts (the analytics copy queue in functions/ is built on
 * it too, and functions/ never imports src/); the Worker's batchers import it from here.
 */
export { Coalescer, type CoalescerOptions, LOST, type SendBatch, TAKEOVER_MS } from "../../functions/coalescer";
