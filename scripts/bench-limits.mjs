#!/usr/bin/env node
// `npm run bench:limits`: what the rate limiter costs, measured in one run on this machine.
//
// Starts the Worker in workerd through Miniflare's API (no dev proxy in the way) and drives it with
// autocannon over loopback. Reports requests/s for: a bare route (GET /healthz), publish with the
// limiter off, publish with the limiter on, publish at drop rate 0.5, and the deny path of a
// flooding subject; every figure also as a ratio to the bare route, plus limiter-object calls per
// 100 denials. Options: --seconds N (default 5), --connections N (default 20).
import { dirname, join } from "node:path";
import { fileURLToPath } from "node:url";
import autocannon from "autocannon";
import { build } from "esbuild";
import { convertV4MiniflareOptions, Log, LogLevel, Miniflare } from "miniflare";
import { unstable_readConfig } from "wrangler";

const root = join(dirname(fileURLToPath(import.meta.url)), "..");
const arg = (name, fallback) => {
  const i = process.argv.indexOf(`--${name}`);
  return i > 0 ? Number(process.argv[i + 1]) : fallback;
};
const SECONDS = arg("seconds", 5);
const CONNECTIONS = arg("connections", 20);
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

const mf = new Miniflare(options({}));
let base = (await mf.ready).toString().replace(/\/$/, "");

async function reconfigure(vars) {
  await mf.setOptions(options(vars));
  base = (await mf.ready).toString().replace(/\/$/, "");
}

async function mintToken(sub) {
  const res = await fetch(`${base}/v1/tokens`, {
    method: "POST",
    headers: {
      authorization: `Bearer ${ADMIN}`,
      "content-type": "application/json",
      "cf-connecting-ip": `198.51.100.${Math.floor(Math.random() * 250)}`,
    },
    body: JSON.stringify({ sub, channels: ["public:bench.*"], ttl: "1h" }),
  });
  if (res.status !== 201) throw new Error(`mint failed: ${res.status} ${await res.text()}`);
  return (await res.json()).access_token;
}

async function load(title, opts) {
  process.stdout.write(`  running ${title} for ${SECONDS}s … `);
  const { path, ...rest } = opts;
  const r = await autocannon({ url: base + path, connections: CONNECTIONS, duration: SECONDS, ...rest });
  const statuses = Object.fromEntries(Object.entries(r.statusCodeStats ?? {}).map(([code, v]) => [code, v.count]));
  console.log(`${Math.round(r.requests.average)} req/s`, JSON.stringify(statuses));
  return { title, rps: r.requests.average, p50: r.latency.p50, p99: r.latency.p99, statuses };
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

console.log(`floodgate bench:limits — ${SECONDS}s per scenario, ${CONNECTIONS} connections, Node ${process.version}`);
const rows = [];
const generous = { PUBLISH_RATE: "1000000/s", PUBLISH_BURST: "1000000" };

await reconfigure({ PUBLISH_RATE: "" });
rows.push(await load("bare route (GET /healthz)", { path: "/healthz" }));
rows.push(await load("publish, limiter off, throttle 0", publishOpts(await mintToken("off"), "public:bench.off")));

await reconfigure(generous);
rows.push(await load("publish, limiter on, throttle 0", publishOpts(await mintToken("on"), "public:bench.on")));
await fetch(`${base}/v1/admin/throttle/public:bench.half`, {
  method: "PUT",
  headers: { authorization: `Bearer ${ADMIN}` },
  body: JSON.stringify({ rate: 0.5 }),
});
rows.push(await load("publish, limiter on, throttle 0.5", publishOpts(await mintToken("half"), "public:bench.half")));

await reconfigure({ PUBLISH_RATE: "1/h", PUBLISH_BURST: "" });
const before = await metrics();
rows.push(await load("deny path (one flooding subject)", publishOpts(await mintToken("flood"), "public:bench.flood")));
const after = await metrics();
rows.push(await load("bare route again (drift check)", { path: "/healthz" }));

const bare = (rows[0].rps + rows[rows.length - 1].rps) / 2;
console.log("\n| scenario | req/s | p50 ms | p99 ms | ratio to bare | statuses |");
console.log("|---|---:|---:|---:|---:|---|");
for (const r of rows) {
  console.log(
    `| ${r.title} | ${Math.round(r.rps)} | ${r.p50} | ${r.p99} | ${(r.rps / bare).toFixed(2)} | ${JSON.stringify(r.statuses)} |`,
  );
}
const denied = after.denied - before.denied;
const objectCalls = denied - (after.cacheHits - before.cacheHits);
const off = rows[1].rps;
const on = rows[2].rps;
console.log(`\nlimiter cost: publish with limiter on runs at ${(on / off).toFixed(2)} of limiter off`);
console.log(
  `deny cache: ${denied} denials, ${objectCalls} limiter-object calls → ${((100 * objectCalls) / Math.max(1, denied)).toFixed(2)} calls per 100 denials`,
);
await mf.dispose();
