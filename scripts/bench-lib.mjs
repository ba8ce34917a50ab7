// Shared by the benchmark scripts: the Worker bundled and started in workerd through Miniflare's API
// (no dev proxy in the way), a bare Hono Worker as the reference, autocannon runs, tokens, metrics.
// Debugging aids: BENCH_DEBUG_500=1 prints the body of the first 5xx answers of each run; INSPECT=1
// opens workerd's inspector on port 9229 (attach Chrome DevTools or send Profiler.* over CDP).
import { existsSync, mkdtempSync, readdirSync, readFileSync, readlinkSync, rmSync } from "node:fs";
import { dirname, join } from "node:path";
import { fileURLToPath } from "node:url";
import autocannon from "autocannon";
import { build } from "esbuild";
import { convertV4MiniflareOptions, Log, LogLevel, Miniflare } from "miniflare";
import { unstable_readConfig } from "wrangler";

export const root = join(dirname(fileURLToPath(import.meta.url)), "..");
export const ADMIN = "bench-admin-token";

/** `--name value` from the command line, or the fallback. */
export function arg(name, fallback) {
  const i = process.argv.indexOf(`--${name}`);
  return i > 0 ? process.argv[i + 1] : fallback;
}

const config = unstable_readConfig({ config: join(root, "wrangler.toml") }, { hideWarnings: true });
/** The analytics channel of the shipped `[vars]`, where the Worker under test copies its drops. */
export const ANALYTICS_CHANNEL = config.vars.ANALYTICS_CHANNEL;

/** Bundles a Worker module (esbuild options `entryPoints` or `stdin`) to one ES module's text. */
export async function bundle(entry) {
  const out = await build({
    ...entry,
    bundle: true,
    write: false,
    format: "esm",
    platform: "neutral",
    target: "es2022",
    external: ["cloudflare:*", "node:*"],
    mainFields: ["module", "main"],
    conditions: ["workerd", "worker", "browser", "import"],
  });
  return out.outputFiles[0].text;
}

/**
 * Starts one Worker in its own workerd; resolves to { base, pid (that workerd's), dispose }.
 * Requests go straight to the Worker through a direct socket: Miniflare's default socket passes every
 * request through its own entry Worker first (a dev-time router that rebuilds the Request and clones
 * its `cf` object), which cost about 250 µs of workerd CPU per request here, more than a bare route
 * itself, and would flatter every ratio. BENCH_VIA_ENTRY=1 measures through it instead.
 */
export async function startWorker(worker) {
  const direct = !process.env.BENCH_VIA_ENTRY;
  const storage = storageDir();
  // Miniflare 5 takes a new option shape; convertV4MiniflareOptions accepts the long-documented v4 one.
  const mf = new Miniflare(
    convertV4MiniflareOptions({
      host: "127.0.0.1",
      ...(storage ? { resourcePersistencePath: storage } : {}),
      inspectorPort: process.env.INSPECT ? 9229 : undefined,
      port: 0,
      log: new Log(LogLevel.WARN),
      workers: [
        {
          compatibilityDate: config.compatibility_date,
          compatibilityFlags: config.compatibility_flags,
          ...(direct ? { unsafeDirectSockets: [{ host: "127.0.0.1", port: 0 }] } : {}),
          ...worker,
        },
      ],
    }),
  );
  const url = direct ? await mf.ready.then(() => mf.unsafeGetDirectURL(worker.name)) : await mf.ready;
  const dispose = async () => {
    await mf.dispose();
    if (storage) rmSync(storage, { recursive: true, force: true });
  };
  return { base: url.toString().replace(/\/$/, ""), pid: listenerPid(Number(url.port)), dispose };
}

/**
 * The process listening on `port` on this machine (Linux: /proc), or null. Used to read a workerd's
 * CPU time, which is steadier than throughput on a small shared machine.
 */
function listenerPid(port) {
  if (process.platform !== "linux") return null;
  const hex = `:${port.toString(16).toUpperCase().padStart(4, "0")}`;
  let inode = null;
  for (const table of ["/proc/net/tcp", "/proc/net/tcp6"]) {
    if (!existsSync(table)) continue;
    for (const line of readFileSync(table, "utf8").split("\n").slice(1)) {
      const cols = line.trim().split(/\s+/);
      if (cols[1]?.endsWith(hex) && cols[3] === "0A") inode = cols[9]; // 0A: LISTEN
    }
  }
  if (!inode) return null;
  for (const pid of readdirSync("/proc").filter((d) => /^\d+$/.test(d))) {
    try {
      for (const fd of readdirSync(`/proc/${pid}/fd`)) {
        if (readlinkSync(`/proc/${pid}/fd/${fd}`) === `socket:[${inode}]`) return Number(pid);
      }
    } catch {
      // a process that ended, or one we may not inspect
    }
  }
  return null;
}

/** CPU time a process has used so far, in µs, summed over its threads (schedstat: ns, not 10 ms ticks). */
export function cpuMicros(pid) {
  if (!pid) return Number.NaN;
  let ns = 0;
  for (const task of readdirSync(`/proc/${pid}/task`)) {
    try {
      ns += Number(readFileSync(`/proc/${pid}/task/${task}/schedstat`, "utf8").split(" ")[0]);
    } catch {
      // a thread that ended between the listing and the read
    }
  }
  return ns / 1000;
}

/**
 * Where the Worker's Durable Objects and KV keep their files: a fresh directory in memory (/dev/shm)
 * when the machine has one. Local workerd fsyncs every SQLite commit on the thread that runs the
 * Worker — about a third of a publish's CPU when each goes to cold objects — where production storage
 * commits without blocking the isolate. BENCH_DISK=1 keeps Miniflare's default (a temporary directory
 * on disk).
 */
function storageDir() {
  if (process.env.BENCH_DISK || !existsSync("/dev/shm")) return undefined;
  const dir = mkdtempSync("/dev/shm/floodgate-bench-");
  // Memory, not disk: never leave it behind, even when a run is interrupted.
  process.once("exit", () => rmSync(dir, { recursive: true, force: true }));
  return dir;
}

/**
 * Floodgate in workerd with the shipped [vars] plus `vars`. Returns { base, pid, dispose }. `entry`
 * (esbuild options, as for {@link bundle}) swaps the Worker entry for one that exports the same
 * Durable Object classes, to drive an object directly.
 */
export async function startFloodgate(vars = {}, entry = { entryPoints: [join(root, "src/index.ts")] }) {
  return startWorker({
    name: "floodgate",
    modules: [{ type: "ESModule", path: "index.mjs", contents: await bundle(entry) }],
    kvNamespaces: ["THROTTLE_KV"],
    durableObjects: {
      CHANNEL: { className: "ChannelObject", useSQLite: true },
      RELAY: { className: "Relay", useSQLite: true },
      REFRESH_LEDGER: { className: "RefreshLedger", useSQLite: true },
      RATE_LIMITER: { className: "RateLimiter", useSQLite: true },
      METRICS: { className: "MetricsStore", useSQLite: true },
      SAMPLER: { className: "ActiveChannels", useSQLite: true },
    },
    bindings: { ...config.vars, TOKEN_SECRET: "bench-token-secret-0123456789abcdef", ADMIN_TOKEN: ADMIN, ...vars },
  });
}

/**
 * The reference: a bare Hono Worker in its own workerd. `GET /bare` answers a small JSON body;
 * `GET /bare-rpc2` also makes two no-op Durable Object calls in turn (the shape of a limited,
 * delivered publish); `POST /bare` reads the body and answers 429 (what a denied publish must do at least, since the
 * contract answers 400/413 before any 429).
 */
export async function startBare() {
  const contents = await bundle({
    stdin: {
      contents: `import { Hono } from "hono";
import { DurableObject } from "cloudflare:workers";
export class Noop extends DurableObject {
  ping() { return 1; }
  write() {
    this.ctx.storage.sql.exec("CREATE TABLE IF NOT EXISTS t (k INTEGER PRIMARY KEY, v INTEGER)");
    this.ctx.storage.sql.exec("INSERT OR REPLACE INTO t (k, v) VALUES (1, ?)", Date.now());
    return 1;
  }
}
const app = new Hono();
app.get("/bare", (c) => c.json({ ok: true }));
// The cost floor of a publish's shape: one request that makes two Durable Object calls in turn.
app.get("/bare-rpc2", async (c) => {
  await c.env.NOOP.get(c.env.NOOP.idFromName("a")).ping();
  await c.env.NOOP.get(c.env.NOOP.idFromName("b")).ping();
  return c.json({ ok: true });
});
// The same, but each call writes one row (a durable write holds the object's answer until stored).
app.get("/bare-rpc2w", async (c) => {
  await c.env.NOOP.get(c.env.NOOP.idFromName("a")).write();
  await c.env.NOOP.get(c.env.NOOP.idFromName("b")).write();
  return c.json({ ok: true });
});
app.post("/bare", async (c) => {
  const body = await c.req.arrayBuffer();
  return c.json({ code: "resource_exhausted", bytes: body.byteLength }, 429);
});
export default app;`,
      resolveDir: root,
      loader: "ts",
    },
  });
  return startWorker({
    name: "bare",
    modules: [{ type: "ESModule", path: "bare.mjs", contents }],
    durableObjects: { NOOP: { className: "Noop", useSQLite: true } },
  });
}

/** One autocannon run: { rps, p50, p99, statuses }. */
export async function load(url, opts, { seconds, connections }) {
  let shown = 0;
  const debug = process.env.BENCH_DEBUG_500
    ? {
        requests: [
          {
            ...opts,
            onResponse: (status, body) => {
              if (status >= 500 && shown++ < 2) console.log(`  ${status} from ${url}: ${body}`);
            },
          },
        ],
      }
    : {};
  const r = await autocannon({ url, connections, duration: seconds, ...opts, ...debug });
  const statuses = Object.fromEntries(Object.entries(r.statusCodeStats ?? {}).map(([code, v]) => [code, v.count]));
  return { rps: r.requests.average, p50: r.latency.p50, p99: r.latency.p99, statuses };
}

let mints = 0;
/** Mints an access token through the admin API, each from its own client IP (token-issue budgets). */
export async function mintToken(base, sub, channels, rl) {
  mints++;
  const res = await fetch(`${base}/v1/tokens`, {
    method: "POST",
    headers: {
      authorization: `Bearer ${ADMIN}`,
      "content-type": "application/json",
      "cf-connecting-ip": `198.18.${(mints >> 8) & 255}.${mints & 255}`,
    },
    body: JSON.stringify({ sub, channels, ttl: "1h", ...(rl ? { rl } : {}) }),
  });
  if (res.status !== 201) throw new Error(`mint failed: ${res.status} ${await res.text()}`);
  return (await res.json()).access_token;
}

export function publishOpts(token, channel) {
  return {
    method: "POST",
    path: `/v1/publish/${channel}`,
    headers: { authorization: `Bearer ${token}`, "content-type": "application/json" },
    body: JSON.stringify({ emoji: "🔥", at: 1 }),
  };
}

export async function setRate(base, channel, rate) {
  const res = await fetch(`${base}/v1/admin/throttle/${channel}`, {
    method: "PUT",
    headers: { authorization: `Bearer ${ADMIN}` },
    body: JSON.stringify({ rate }),
  });
  if (res.status !== 200) throw new Error(`set rate failed: ${res.status}`);
}

/** Every series of /metrics as { "name{labels}": value }. */
export async function metrics(base) {
  const text = await (await fetch(`${base}/metrics`, { headers: { authorization: `Bearer ${ADMIN}` } })).text();
  const out = {};
  for (const line of text.split("\n")) {
    if (!line || line.startsWith("#")) continue;
    const i = line.lastIndexOf(" ");
    out[line.slice(0, i)] = Number(line.slice(i + 1));
  }
  return out;
}

export function median(xs) {
  const v = [...xs].sort((a, b) => a - b);
  if (v.length === 0) return Number.NaN;
  return v.length % 2 ? v[(v.length - 1) / 2] : (v[v.length / 2 - 1] + v[v.length / 2]) / 2;
}

export function sumStatuses(list) {
  const out = {};
  for (const r of list) for (const [k, n] of Object.entries(r.statuses)) out[k] = (out[k] ?? 0) + n;
  return out;
}
