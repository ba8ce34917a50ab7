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
import { dirname, join } from "node:path";
import { fileURLToPath } from "node:url";
import autocannon from "autocannon";
import { build } from "esbuild";
import { convertV4MiniflareOptions, Log, LogLevel, Miniflare } from "miniflare";
import { unstable_readConfig } from "wrangler";

const root = join(dirname(fileURLToPath(import.meta.url)), "..");
const arg = (name, fallback) => {
  const i = process.argv.indexOf(`--${name}`);
  return i > 0 ? process.argv[i + 1] : fallback;
};
const SECONDS = Number(arg("seconds", 2));
const ROUNDS = Number(arg("rounds", 5));
const CONNECTIONS = Number(arg("connections", 20));
const ONLY = arg("only", null) ? new Set(["bare", "bare-post", ...arg("only").split(",")]) : null;
const ADMIN = "bench-admin-token";

const config = unstable_readConfig({ config: join(root, "wrangler.toml") }, { hideWarnings: true });
const bundle = await build({
  entryPoints: [join(root, "src/index.ts")],
  bundle: true,
  write: false,
  format: "esm",
  platform: "neutral",
  target: "es2022",
  external: ["cloudflare:*", "node:*"],
  mainFields: ["module", "main"],
  conditions: ["workerd", "worker", "browser", "import"],
});

// Miniflare 5 takes a new option shape; convertV4MiniflareOptions accepts the long-documented v4 one.
function options(vars) {
  return convertV4MiniflareOptions({
    host: "127.0.0.1",
    port: 0,
    log: new Log(LogLevel.WARN),
    workers: [
      {
        name: "floodgate",
        modules: [{ type: "ESModule", path: "index.mjs", contents: bundle.outputFiles[0].text }],
        compatibilityDate: config.compatibility_date,
        kvNamespaces: ["THROTTLE_KV"],
        durableObjects: {
          CHANNEL: { className: "ChannelObject", useSQLite: true },
          REFRESH_LEDGER: { className: "RefreshLedger", useSQLite: true },
          RATE_LIMITER: { className: "RateLimiter", useSQLite: true },
          METRICS: { className: "MetricsStore", useSQLite: true },
        },
        bindings: { ...config.vars, TOKEN_SECRET: "bench-secret-0123456789", ADMIN_TOKEN: ADMIN, ...vars },
      },
    ],
  });
}

// The default publish budget is disabled; a token's `rl` switches the limiter on for that token.
const mf = new Miniflare(options({ PUBLISH_RATE: "", PUBLISH_BURST: "" }));
const base = (await mf.ready).toString().replace(/\/$/, "");

// The reference for the deny path: a bare Hono route in the same runtime that takes the same POST,
// reads its body (the contract answers 400/413 before any 429, so the body must be read) and answers
// a 429. Anything the deny path costs beyond this is Floodgate's own work.
const bareBundle = await build({
  stdin: {
    contents: `import { Hono } from "hono";
const app = new Hono();
app.post("/bare", async (c) => {
  const body = await c.req.arrayBuffer();
  return c.json({ code: "resource_exhausted", bytes: body.byteLength }, 429);
});
export default app;`,
    resolveDir: root,
    loader: "ts",
  },
  bundle: true,
  write: false,
  format: "esm",
  platform: "neutral",
  mainFields: ["module", "main"],
});
const bareMf = new Miniflare(
  convertV4MiniflareOptions({
    host: "127.0.0.1",
    port: 0,
    log: new Log(LogLevel.WARN),
    workers: [
      {
        name: "bare",
        modules: [{ type: "ESModule", path: "bare.mjs", contents: bareBundle.outputFiles[0].text }],
        compatibilityDate: config.compatibility_date,
      },
    ],
  }),
);
const bareBase = (await bareMf.ready).toString().replace(/\/$/, "");

async function mintToken(sub, rl) {
  const res = await fetch(`${base}/v1/tokens`, {
    method: "POST",
    headers: {
      authorization: `Bearer ${ADMIN}`,
      "content-type": "application/json",
      "cf-connecting-ip": `198.51.100.${Math.floor(Math.random() * 250)}`,
    },
    body: JSON.stringify({ sub, channels: ["public:bench.*"], ttl: "1h", ...(rl ? { rl } : {}) }),
  });
  if (res.status !== 201) throw new Error(`mint failed: ${res.status} ${await res.text()}`);
  return (await res.json()).access_token;
}

async function load(opts) {
  const { path, origin = base, ...rest } = opts;
  const r = await autocannon({ url: origin + path, connections: CONNECTIONS, duration: SECONDS, ...rest });
  const statuses = Object.fromEntries(Object.entries(r.statusCodeStats ?? {}).map(([code, v]) => [code, v.count]));
  return { rps: r.requests.average, p50: r.latency.p50, p99: r.latency.p99, statuses };
}

function publishOpts(token, channel) {
  return {
    method: "POST",
    path: `/v1/publish/${channel}`,
    headers: { authorization: `Bearer ${token}`, "content-type": "application/json" },
    body: JSON.stringify({ emoji: "🔥", at: 1 }),
  };
}

async function metrics() {
  const text = await (await fetch(`${base}/metrics`, { headers: { authorization: `Bearer ${ADMIN}` } })).text();
  const v = (s) =>
    Number(
      text
        .split("\n")
        .find((l) => l.startsWith(`${s} `))
        ?.split(" ")[1] ?? 0,
    );
  return {
    denied: v('floodgate_rate_limit_decisions_total{bucket="publish",result="denied"}'),
    cacheHits: v('floodgate_rate_limit_deny_cache_hits_total{bucket="publish"}'),
  };
}

await fetch(`${base}/v1/admin/throttle/public:bench.half`, {
  method: "PUT",
  headers: { authorization: `Bearer ${ADMIN}` },
  body: JSON.stringify({ rate: 0.5 }),
});
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

const median = (xs) => {
  const v = [...xs].sort((a, b) => a - b);
  return v.length % 2 ? v[(v.length - 1) / 2] : (v[v.length / 2 - 1] + v[v.length / 2]) / 2;
};
const sum = (list) => {
  const out = {};
  for (const r of list) for (const [k, n] of Object.entries(r.statuses)) out[k] = (out[k] ?? 0) + n;
  return out;
};
const med = Object.fromEntries([...runs].map(([id, list]) => [id, median(list.map((r) => r.rps))]));
console.log("\n| scenario | req/s (median) | p50 ms | p99 ms | ratio to bare | statuses (all rounds) |");
console.log("|---|---:|---:|---:|---:|---|");
for (const s of scenarios) {
  const list = runs.get(s.id);
  console.log(
    `| ${s.title} | ${Math.round(med[s.id])} | ${median(list.map((r) => r.p50))} | ${median(list.map((r) => r.p99))} | ${(med[s.id] / med.bare).toFixed(2)} | ${JSON.stringify(sum(list))} |`,
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
await mf.dispose();
await bareMf.dispose();
