#!/usr/bin/env node
// Why Floodgate's waiting requests poll on their own timers (functions/waiting.ts) instead of being
// woken: a minimal Worker in which the first request of a batch makes a Durable Object call and then
// resolves the promises the other requests of the batch created and are awaiting. Each waiter keeps a
// timer pending (without one workerd cancels it as hung before the wake). With the default
// `handle_cross_request_promise_resolution` flag each waiter should continue in its own request.
//
// Usage: npx node scripts/repro/cross-request-wake.mjs [seconds] [connections]   (default 15 s, 20)
// On workerd 1.20261117 it works for a while and then breaks for good: in 2 of 3 runs of 15 s, a
// third or more of the requests answered 500 ("Cannot perform I/O on behalf of a different
// request"); the third run answered all 65,201 with 200. Exits 1 if any request failed.
import { load } from "../lib/bench.mjs";
import { root } from "../lib/root.mjs";
import { bundle, startWorker } from "../lib/workerd.mjs";

const seconds = Number(process.argv[2] ?? 15);
const connections = Number(process.argv[3] ?? 20);

const worker = `
import { Hono } from "hono";
import { DurableObject } from "cloudflare:workers";
export class Noop extends DurableObject { ping(n) { return n; } }
let open = null; // the batch still taking waiters: { wake: [] }
const app = new Hono();
app.post("/publish", async (c) => {
  await c.req.arrayBuffer();
  if (open) {
    const batch = open;
    let timer = null;
    const answer = await new Promise((resolve) => {
      batch.wake.push(resolve);
      timer = setTimeout(() => resolve("lost"), 5000);
    });
    clearTimeout(timer);
    return c.json({ role: "waiter", answer });
  }
  const batch = { wake: [] };
  open = batch;
  const work = (async () => {
    await new Promise((r) => setTimeout(r, 1)); // gather company
    open = null;
    const n = await c.env.NOOP.get(c.env.NOOP.idFromName("a")).ping(batch.wake.length);
    for (const wake of batch.wake) wake(n); // resolved from this request's context
    return n;
  })();
  c.executionCtx.waitUntil(work);
  return c.json({ role: "leader", answer: await work });
});
export default app;`;

// Started like the benchmarks' Workers: wrangler.toml's compatibility date and flags, a direct socket.
const repro = await startWorker({
  name: "repro",
  modules: [
    { type: "ESModule", path: "repro.mjs", contents: await bundle({ stdin: { contents: worker, resolveDir: root } }) },
  ],
  durableObjects: { NOOP: { className: "Noop", useSQLite: true } },
});
console.log(`${connections} connections for ${seconds} s against the minimal Worker…`);
const { statuses } = await load(`${repro.base}/publish`, { method: "POST", body: "{}" }, { seconds, connections });
console.log(`answers: ${JSON.stringify(statuses)}`);
await repro.stop();
const failed = Object.entries(statuses).some(([code]) => code !== "200");
console.log(failed ? "cross-request wakes failed under load" : "every request answered 200");
process.exit(failed ? 1 : 0);
