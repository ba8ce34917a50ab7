#!/usr/bin/env node
// `npm run bench:limits`: what the rate limiter costs, measured in one run on this machine.
//
// Starts the Worker in workerd through Miniflare's API (no dev proxy in the way) and drives it with
// autocannon over loopback. Scenarios: a bare route (GET /healthz), publish with the limiter off,
// publish with the limiter on, publish at drop rate 0.5, and the deny path of a flooding subject.
// All run against one Worker configuration (the default publish budget disabled; the limiter is
// switched on per token with the `rl` override), so they can be interleaved: each round runs every
// scenario for --seconds, and the table reports the median over --rounds rounds. On a 2-core machine
// throughput drifts by ±30% over a minute; interleaving puts the same drift into every scenario, so
// the ratios hold where back-to-back runs would not.
// Options: --seconds N (default 2), --rounds N (default 5), --connections N (default 20),
// --only deny (a subset of: off, on, half, deny; the two bare references always run).
import {
  metrics as allMetrics,
  median,
  publishOpts,
  load as run,
  setRate,
  startBare,
  sumStatuses,
} from "./lib/bench.mjs";
import { options } from "./lib/options.mjs";
import { mintToken as mint } from "./lib/tokens.mjs";
import { startFloodgate } from "./lib/workerd.mjs";

const opts = options("bench:limits", { seconds: 2, rounds: 5, connections: 20, only: null });
const SECONDS = opts.seconds;
const ROUNDS = opts.rounds;
const CONNECTIONS = opts.connections;
const ONLY = opts.only ? new Set(["bare", "bare-post", ...opts.only.split(",")]) : null;

// The default publish budget is disabled; a token's `rl` switches the limiter on for that token.
const fg = await startFloodgate({ PUBLISH_RATE: "", PUBLISH_BURST: "" });
const base = fg.base;
const bare = await startBare();
const bareBase = bare.base;

const mintToken = (sub, rl) => mint(fg, { sub, channels: ["public:bench.*"], rl });
async function load(opts) {
  const { path, origin = base, ...rest } = opts;
  return run(origin + path, rest, { seconds: SECONDS, connections: CONNECTIONS });
}
async function metrics() {
  const m = await allMetrics(fg);
  return {
    denied: m['floodgate_rate_limit_decisions_total{bucket="publish",result="denied"}'] ?? 0,
    cacheHits: m['floodgate_rate_limit_deny_cache_hits_total{bucket="publish"}'] ?? 0,
  };
}

await setRate(fg, "public:bench.half", 0.5);
const generous = "1000000/s";
const scenarios = [
  { id: "bare", title: "bare route (GET /healthz)", opts: { path: "/healthz" } },
  {
    id: "off",
    title: "publish, limiter off, throttle 0",
    opts: publishOpts(await mintToken("off"), "public:bench.off"),
  },
  {
    id: "on",
    title: "publish, limiter on, throttle 0",
    opts: publishOpts(await mintToken("on", generous), "public:bench.on"),
  },
  {
    id: "half",
    title: "publish, limiter on, throttle 0.5",
    opts: publishOpts(await mintToken("half", generous), "public:bench.half"),
  },
  {
    id: "bare-post",
    title: "bare Hono POST that reads the body and answers 429 (deny-path reference)",
    opts: { ...publishOpts("x", "public:bench.bare"), path: "/bare", origin: bareBase },
  },
  {
    id: "deny",
    title: "deny path (one flooding subject)",
    opts: publishOpts(await mintToken("flood", "1/h"), "public:bench.flood"),
  },
].filter((s) => !ONLY || ONLY.has(s.id));

console.log(
  `floodgate bench:limits — ${scenarios.length} scenarios × ${ROUNDS} rounds × ${SECONDS}s, ${CONNECTIONS} connections, Node ${process.version}`,
);
const before = await metrics();
const runs = new Map(scenarios.map((s) => [s.id, []]));
for (let round = 1; round <= ROUNDS; round++) {
  const line = [];
  for (const s of scenarios) {
    const r = await load(s.opts);
    runs.get(s.id).push(r);
    line.push(`${s.id} ${Math.round(r.rps)}`);
  }
  console.log(`  round ${round}/${ROUNDS}: ${line.join(", ")} req/s`);
}
const after = await metrics();

const med = Object.fromEntries([...runs].map(([id, list]) => [id, median(list.map((r) => r.rps))]));
console.log("\n| scenario | req/s (median) | p50 ms | p99 ms | ratio to bare | statuses (all rounds) |");
console.log("|---|---:|---:|---:|---:|---|");
for (const s of scenarios) {
  const list = runs.get(s.id);
  console.log(
    `| ${s.title} | ${Math.round(med[s.id])} | ${median(list.map((r) => r.p50))} | ${median(list.map((r) => r.p99))} | ${(med[s.id] / med.bare).toFixed(2)} | ${JSON.stringify(sumStatuses(list))} |`,
  );
}
// Ratios are taken within each round (scenarios a few seconds apart share the machine's state) and
// the median of those is reported; the ratio of the medians is shown beside it.
const roundRatio = (a, b) => median(runs.get(a).map((r, i) => r.rps / runs.get(b)[i].rps));
if (med.on && med.off) {
  console.log(
    `\nlimiter cost: publish with limiter on runs at ${roundRatio("on", "off").toFixed(2)} of limiter off (median of per-round ratios; ratio of medians ${(med.on / med.off).toFixed(2)}; goal ≥ 0.70)`,
  );
}
if (med.deny) {
  console.log(
    `deny path: ${roundRatio("deny", "bare-post").toFixed(2)} of the bare Hono POST (ratio of medians ${(med.deny / med["bare-post"]).toFixed(2)}; goal ≥ 0.80), ${roundRatio("deny", "bare").toFixed(2)} of GET /healthz`,
  );
  const denied = after.denied - before.denied;
  const objectCalls = denied - (after.cacheHits - before.cacheHits);
  console.log(
    `deny cache: ${denied} denials, ${objectCalls} limiter-object calls → ${((100 * objectCalls) / Math.max(1, denied)).toFixed(2)} calls per 100 denials (goal ≤ 5)`,
  );
}
await fg.stop();
await bare.stop();
