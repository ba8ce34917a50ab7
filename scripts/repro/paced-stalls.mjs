#!/usr/bin/env node
// What of a local phase's p99 is the runtime's (docs/benchmarks.md, "Reads beside a hot channel"): a
// minimal Worker with no Floodgate code in it, driven at a steady pace, grows its workerd process the
// whole run, the most when each request calls a Durable Object, and a request now and then waits out
// a pause of the runtime. Three shapes, in
// turn, each in a workerd of its own: `get` (a bare GET), `rpc` (one no-op object call a request) and
// `write` (one object call that appends the body as one SQLite row: the one-write floor). Each request
// is timed on its own; a stall is a run of requests slower than 25 ms. Prints, per shape, p50, p99,
// the worst request, the stalls (when each began and its worst request) and workerd's resident memory
// before and after.
//
// Usage: npx node scripts/repro/paced-stalls.mjs [seconds] [rate] [shapes]
//   (default 30 s at 200 requests/s, shapes get,rpc,write). Exits 1 if a request failed.
import { readFileSync } from "node:fs";
import { root } from "../lib/root.mjs";
import { bundle, startWorker } from "../lib/workerd.mjs";

const seconds = Number(process.argv[2] ?? 30);
const rate = Number(process.argv[3] ?? 200);
const shapes = (process.argv[4] ?? "get,rpc,write").split(",");
const SLOW_MS = 25;

const worker = `
import { DurableObject } from "cloudflare:workers";
export class Log extends DurableObject {
  ping() { return 1; }
  append(data) {
    this.ctx.storage.sql.exec("CREATE TABLE IF NOT EXISTS log (seq INTEGER PRIMARY KEY, data TEXT)");
    return this.ctx.storage.sql.exec("INSERT INTO log (data) VALUES (?) RETURNING seq", data).one().seq;
  }
}
export default {
  async fetch(request, env) {
    const path = new URL(request.url).pathname;
    if (path === "/get") return Response.json({ ok: true });
    const log = env.LOG.get(env.LOG.idFromName("one"));
    if (path === "/rpc") return Response.json({ ok: await log.ping() });
    return Response.json({ seq: await log.append(await request.text()) });
  },
};`;

const residentMb = (pid) => Number(/VmRSS:\s+(\d+)/.exec(readFileSync(`/proc/${pid}/status`, "utf8"))?.[1]) / 1024;

/** Sends `rate` requests a second for `seconds` at a steady pace; resolves to [sent at ms, took ms] each. */
async function paced(url, init) {
  const total = seconds * rate;
  const timings = [];
  let sent = 0;
  let pending = 0;
  let failed = 0;
  const t0 = performance.now();
  await new Promise((done) => {
    const tick = () => {
      const due = Math.min(total, Math.floor(((performance.now() - t0) / 1000) * rate));
      for (; sent < due; sent++) {
        const at = performance.now();
        pending++;
        fetch(url, init)
          .then(async (res) => {
            await res.arrayBuffer();
            if (!res.ok) failed++;
            timings.push([at - t0, performance.now() - at]);
          })
          .catch(() => failed++)
          .finally(() => {
            if (--pending === 0 && sent === total) done();
          });
      }
      if (sent < total) setTimeout(tick, 2);
    };
    tick();
  });
  return { timings, failed };
}

/** Runs of slow requests less than 200 ms apart, as [began at s, worst ms]. */
function stalls(timings) {
  const out = [];
  let last = Number.NEGATIVE_INFINITY;
  for (const [at, took] of timings.filter(([, ms]) => ms > SLOW_MS).sort((a, b) => a[0] - b[0])) {
    if (at - last > 200) out.push([at / 1000, took]);
    else out[out.length - 1][1] = Math.max(out[out.length - 1][1], took);
    last = at;
  }
  return out;
}

const contents = await bundle({ stdin: { contents: worker, resolveDir: root, loader: "js" } });
let failures = 0;
for (const shape of shapes) {
  const w = await startWorker({
    name: "paced",
    modules: [{ type: "ESModule", path: "paced.mjs", contents }],
    durableObjects: { LOG: { className: "Log", useSQLite: true } },
  });
  try {
    const before = residentMb(w.pid);
    const init = shape === "write" ? { method: "POST", body: JSON.stringify({ emoji: "🔥", at: 1 }) } : {};
    const { timings, failed } = await paced(`${w.base}/${shape}`, init);
    failures += failed;
    const took = timings.map(([, ms]) => ms).sort((a, b) => a - b);
    const pct = (q) => took[Math.min(took.length - 1, Math.floor(took.length * q))].toFixed(1);
    const found = stalls(timings);
    console.log(
      `${shape}: ${timings.length} requests, ${failed} failed; p50 ${pct(0.5)} ms, p99 ${pct(0.99)} ms, worst ${pct(1)} ms; ` +
        `workerd ${before.toFixed(0)} → ${residentMb(w.pid).toFixed(0)} MB`,
    );
    console.log(
      `  ${found.length} stalls over ${SLOW_MS} ms: ${found.map(([s, ms]) => `${s.toFixed(1)} s ${ms.toFixed(0)} ms`).join(", ")}`,
    );
  } finally {
    await w.stop();
  }
}
process.exit(failures > 0 ? 1 : 0);
