#!/usr/bin/env node
import { load } from "./lib/bench.mjs";
import { options } from "./lib/options.mjs";
// `npm run bench:analytics`: how many copies of dropped messages per second one analytics channel
// object appends, with the Worker's batching (100 copies per call), for small and large messages.
//
// The Worker under test is Floodgate's own Durable Object classes behind a one-route entry that
// builds a batch of copies and hands it to the analytics channel's object (`appendCopies`, the call
// the Worker's copy queue makes); autocannon keeps --connections such calls in flight, so the object
// always has work queued and its own rate is what is measured. Storage is in memory as for
// `npm run bench` (lib/workerd.mjs). Options: --seconds N (default 5), --connections N (default 8),
// --batch N (default 100), --sizes a,b (message bytes, default 200,30000).
import { root } from "./lib/root.mjs";
import { cpuMicros, startFloodgate } from "./lib/workerd.mjs";

const opts = options("bench:analytics", { seconds: 5, connections: 8, batch: 100, sizes: "200,30000" });
const SECONDS = opts.seconds;
const CONNECTIONS = opts.connections;
const BATCH = opts.batch;
const SIZES = opts.sizes.split(",").map(Number);

const entry = {
  stdin: {
    contents: `// Every Durable Object class of the Worker (export * leaves out its default, replaced below).
export * from "./src/index";
export default {
  async fetch(request, env) {
    const url = new URL(request.url);
    const n = Number(url.searchParams.get("n"));
    const pad = "x".repeat(Number(url.searchParams.get("size")));
    const name = env.ANALYTICS_CHANNEL;
    const now = Date.now();
    const items = Array.from({ length: n }, (_, i) => {
      const source_channel = "public:bench.source" + (i % 10);
      const data = JSON.stringify({ source_channel, message: { pad }, publisher: "bench", drop_rate: 1, dropped_at: now });
      return { data, publisher: "bench", source_channel, dropped_at: now };
    });
    await env.CHANNEL.get(env.CHANNEL.idFromName(name)).appendCopies(name, items, now);
    return new Response("ok");
  },
};`,
    resolveDir: root,
    loader: "js",
  },
};

console.log(
  `analytics object append rate — batches of ${BATCH}, ${CONNECTIONS} calls in flight, ${SECONDS}s per size, Node ${process.version}`,
);
console.log(
  "| message bytes | calls/s | copies/s | MB/s of copies | p50 ms | p99 ms | workerd CPU µs/copy | statuses |",
);
console.log("|---:|---:|---:|---:|---:|---:|---:|---|");
for (const size of SIZES) {
  // A fresh workerd (and object) per size, so one size's stored copies do not slow the next.
  const fg = await startFloodgate({}, entry);
  const url = `${fg.base}/append?n=${BATCH}&size=${size}`;
  await load(url, {}, { seconds: 1, connections: CONNECTIONS }); // warm-up
  const cpu0 = cpuMicros(fg.pid);
  const r = await load(url, {}, { seconds: SECONDS, connections: CONNECTIONS });
  const calls = Object.values(r.statuses).reduce((a, n) => a + n, 0);
  const ok = r.statuses[200] ?? 0;
  const cpuPerCopy = (cpuMicros(fg.pid) - cpu0) / (calls * BATCH);
  const copies = (ok * BATCH) / SECONDS;
  console.log(
    `| ${size} | ${Math.round(ok / SECONDS)} | ${Math.round(copies)} | ${((copies * (size + 120)) / 1e6).toFixed(1)} | ${r.p50} | ${r.p99} | ${Number.isFinite(cpuPerCopy) ? cpuPerCopy.toFixed(1) : "–"} | ${JSON.stringify(r.statuses)} |`,
  );
  await fg.stop();
}
