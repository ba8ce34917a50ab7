#!/usr/bin/env node
// `npm run bench:analytics`: the record of dropped messages under a flood, then the live view's
// append rate.
//
// **Record floods** (docs/benchmarks.md, "The record under a flood"): the whole Worker, its drops
// queue and bucket (local), publishes at drop rate 1: a 30 KB flood from 100 connections for
// --flood-seconds (default 10), and 1 KB drops paced at --pace-rate per second (default 2,000) for
// --pace-seconds (default 60). After each, it waits until every drop is recorded or a counted
// failure (or nothing moved for 30 s), then prints dropped, recorded, failed, unaccounted (must be 0),
// queue messages and R2 writes per 1,000 drops, and how long the queue took to drain after the load.
// --floods-only / --append-only run one part.
//
// **Storage faults** (`--faults`, docs/benchmarks.md, "The record through storage faults"): R2, then
// the analytics object, down for --outage-seconds each (default 60) under --rate drops/s (default 50);
// prints dropped, recorded, failed and unaccounted (must be 0), and copies held twice (must be 0).
// Its parts are in scripts/bench-analytics/faults.mjs.
//
// **Append rate**: how many copies of dropped messages per second one analytics channel
// object appends, with the Worker's batching (100 copies per call), for small and large messages.
// The Worker under test is Floodgate's own Durable Object classes behind a one-route entry that
// builds a batch of copies and hands it to the analytics channel's object (`appendCopies`, the call
// the Worker's copy queue makes); autocannon keeps --connections such calls in flight, so the object
// always has work queued and its own rate is what is measured. Storage is in memory as for
// `npm run bench` (lib/workerd.mjs). Options: --seconds N (default 5), --connections N (default 8),
// --batch N (default 100), --sizes a,b (message bytes, default 200,30000).
import { runFaults } from "./bench-analytics/faults.mjs";
import { counts, settled } from "./bench-analytics/record-counts.mjs";
import { load, publishOpts, setRate } from "./lib/bench.mjs";
import { options } from "./lib/options.mjs";
import { root } from "./lib/root.mjs";
import { mintToken } from "./lib/tokens.mjs";
import { cpuMicros, startFloodgate } from "./lib/workerd.mjs";

const opts = options("bench:analytics", {
  seconds: 5,
  connections: 8,
  batch: 100,
  sizes: "200,30000",
  "flood-seconds": 10,
  "pace-rate": 2000,
  "pace-seconds": 60,
  "floods-only": false,
  "append-only": false,
  faults: false,
  "outage-seconds": 60,
  rate: 50,
  "settle-seconds": 240,
});
if (opts.faults) {
  await runFaults(opts);
  process.exit();
}
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
      return { id: crypto.randomUUID(), data, publisher: "bench", source_channel, dropped_at: now };
    });
    await env.CHANNEL.get(env.CHANNEL.idFromName(name)).appendCopies(name, items, now);
    return new Response("ok");
  },
};`,
    resolveDir: root,
    loader: "js",
  },
};

/** One flood at drop rate 1, then the wait until the record has settled; a row of the table. */
async function flood(fg, token, label, channel, bytes, loadOptions) {
  await setRate(fg, channel, 1);
  const { path, ...publish } = publishOpts(token, channel);
  const body = JSON.stringify({ pad: "x".repeat(bytes) });
  const before = await counts(fg);
  const r = await load(fg.base + path, { ...publish, body, ...loadOptions.extra }, loadOptions);
  const loadEnd = Date.now();
  const d = await settled(fg, before, { quietMs: 30_000, pollMs: 500 });
  const per1k = (n) => ((1000 * n) / Math.max(1, d.dropped)).toFixed(1);
  console.log(
    `| ${label} | ${Math.round(d.dropped / loadOptions.seconds)} | ${d.dropped} | ${d.recorded} | ${d.failed} | ${d.dropped - d.recorded - d.failed} | ${d.unsettled} | ${per1k(d.messages)} | ${per1k(d.writes)} | ${((Date.now() - loadEnd) / 1000).toFixed(1)} | ${JSON.stringify(r.statuses)} |`,
  );
}

if (!opts["append-only"]) {
  const fg = await startFloodgate();
  const token = await mintToken(fg, { sub: "bench-record", channels: ["public:bench.*"], rl: "1000000/s" });
  console.log(`record floods at drop rate 1 (whole Worker, local queue and bucket), Node ${process.version}`);
  console.log(
    "| flood | drops/s | dropped | recorded | failed | unaccounted | unsettled | queue messages /1k drops | R2 writes /1k drops | drained after load (s) | statuses |",
  );
  console.log("|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---|");
  await flood(fg, token, "30 KB, 100 connections", "public:bench.record30k", 30_000, {
    seconds: opts["flood-seconds"],
    connections: 100,
  });
  await flood(fg, token, `1 KB paced at ${opts["pace-rate"]}/s`, "public:bench.record1k", 1_000, {
    seconds: opts["pace-seconds"],
    connections: 50,
    extra: { overallRate: opts["pace-rate"] },
  });
  await fg.stop();
}
if (opts["floods-only"]) process.exit(0);

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
