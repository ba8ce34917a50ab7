// A Worker bundled and started in its own workerd through Miniflare's API, straight to the Worker (no
// dev proxy in the way): what the benchmarks measure and the tests that must talk to workerd itself
// (scripts/lib/dev-server.mjs starts it the way `npm start` does instead, for scripts that check
// what a developer sees). Debugging aids: BENCH_DEBUG_500=1 (scripts/lib/bench.mjs) prints the body
// of the first 5xx answers of each run; INSPECT=1 opens workerd's inspector on port 9229 (attach
// Chrome DevTools or send Profiler.* over CDP); `startWorker({ inspectorPort })` opens it on a port
// of the caller's choosing (scripts/bench-profile.mjs records CPU profiles through it).
import { existsSync, mkdtempSync, readdirSync, readFileSync, readlinkSync, rmSync } from "node:fs";
import { join } from "node:path";
import { build } from "esbuild";
import { convertV4MiniflareOptions, Log, LogLevel, Miniflare } from "miniflare";
import { unstable_readConfig } from "wrangler";
import { root } from "./root.mjs";

/** The admin bearer of every Floodgate started here ({@link startFloodgate}); also its handle's `admin`. */
const ADMIN = "bench-admin-token";

/** A source tree's wrangler.toml, read once per tree (another tree: an older commit, see bench-ref.mjs). */
const configs = new Map();
function readConfig(tree) {
  if (!configs.has(tree)) {
    configs.set(tree, unstable_readConfig({ config: join(tree, "wrangler.toml") }, { hideWarnings: true }));
  }
  return configs.get(tree);
}
const config = readConfig(root);
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
 * Starts one Worker in its own workerd; resolves to { base, pid (that workerd's), stop }.
 * Requests go straight to the Worker through a direct socket: Miniflare's default socket passes every
 * request through its own entry Worker first (a dev-time router that rebuilds the Request and clones
 * its `cf` object), which cost about 250 µs of workerd CPU per request here, more than a bare route
 * itself, and would flatter every ratio. BENCH_VIA_ENTRY=1 measures through it instead; `viaEntry`
 * starts one Worker that way for a test that sets a request's `cf` (the entry Worker takes it from an
 * `MF-CF-Blob` header, JSON; without one a request carries Miniflare's placeholder, continent `NA`).
 */
export async function startWorker({ inspectorPort, config: workerConfig = config, registry, viaEntry, ...worker }) {
  const direct = !viaEntry && !process.env.BENCH_VIA_ENTRY;
  const storage = storageDir();
  // Miniflare 5 takes a new option shape; convertV4MiniflareOptions accepts the long-documented v4 one.
  const mf = new Miniflare(
    convertV4MiniflareOptions({
      host: "127.0.0.1",
      ...(storage ? { resourcePersistencePath: storage } : {}),
      // Workers started with the same registry directory reach each other's objects (by `scriptName`).
      ...(registry ? { unsafeDevRegistryPath: registry } : {}),
      inspectorPort: inspectorPort ?? (process.env.INSPECT ? 9229 : undefined),
      port: 0,
      log: new Log(LogLevel.WARN),
      // No request.cf download (offline it fails with a stack trace): the placeholder is what a local
      // request carries anyway.
      cf: false,
      workers: [
        {
          compatibilityDate: workerConfig.compatibility_date,
          compatibilityFlags: workerConfig.compatibility_flags,
          ...(direct ? { unsafeDirectSockets: [{ host: "127.0.0.1", port: 0 }] } : {}),
          ...worker,
        },
      ],
    }),
  );
  const url = direct ? await mf.ready.then(() => mf.unsafeGetDirectURL(worker.name)) : await mf.ready;
  const stop = async () => {
    await mf.dispose();
    if (storage) rmSync(storage, { recursive: true, force: true });
  };
  // `mf`: the Miniflare instance, for a bench that seeds a binding directly (the recipe's KV).
  return { base: url.toString().replace(/\/$/, ""), pid: listenerPid(Number(url.port)), stop, mf };
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
  if (storageDirs.size === 0) {
    process.once("exit", () => {
      for (const d of storageDirs) rmSync(d, { recursive: true, force: true });
    });
  }
  storageDirs.add(dir);
  return dir;
}
/** The storage directories of every Worker started, removed when the process exits. */
const storageDirs = new Set();

/**
 * The Worker's Durable Object bindings as a tree's wrangler.toml declares them (SQLite-backed: every
 * `new_sqlite_classes` of its migrations), so a class added there (a new object kind) is bound here
 * too without editing the bench, and an older commit gets the classes it had.
 */
function durableObjects(treeConfig) {
  const sqlite = new Set(treeConfig.migrations.flatMap((m) => m.new_sqlite_classes ?? []));
  return Object.fromEntries(
    treeConfig.durable_objects.bindings.map((b) => [
      b.name,
      { className: b.class_name, useSQLite: sqlite.has(b.class_name) },
    ]),
  );
}

/**
 * Floodgate in workerd with the shipped [vars] plus `vars`. Returns { base, admin, pid, stop,
 * spreadMintAddresses } (for scripts/lib/tokens.mjs: no edge sets a client address here). `entry`
 * (esbuild options, as for {@link bundle}) swaps the Worker entry for one that exports the same
 * Durable Object classes, to drive an object directly. `tree` is the source tree to start (default
 * this one; `--against` passes an older commit's, scripts/lib/bench-ref.mjs): its src/index.ts, its
 * wrangler.toml's [vars], bindings, compatibility date and flags. `inspectorPort` opens workerd's
 * inspector there; the handle's `source` is the bundle it runs (a CPU profile's line numbers are
 * that text's). Two Workers in two workerd processes: start both with the same `registry` (a
 * directory), the second with its own `name` and `objectsOf: { name, bindings }` naming the first
 * and the bindings whose objects are the first's (bench-reads.mjs --split). `viaEntry`: through
 * Miniflare's entry Worker, as {@link startWorker} says.
 */
export async function startFloodgate(
  vars = {},
  entry,
  { tree = root, inspectorPort, registry, name = "floodgate", objectsOf, viaEntry } = {},
) {
  const treeConfig = readConfig(tree);
  const source = await bundle(entry ?? { entryPoints: [join(tree, "src/index.ts")], absWorkingDir: tree });
  const objects = durableObjects(treeConfig);
  // Objects of another Worker started with the same `registry` (bound across processes by its name).
  if (objectsOf) for (const b of objectsOf.bindings) if (objects[b]) objects[b].scriptName = objectsOf.name;
  const worker = await startWorker({
    name,
    config: treeConfig,
    inspectorPort,
    registry,
    viaEntry,
    modules: [{ type: "ESModule", path: "index.mjs", contents: source }],
    kvNamespaces: treeConfig.kv_namespaces.map((kv) => kv.binding),
    durableObjects: objects,
    // The record of dropped messages: the drops queue (consumed by the Worker itself, with its
    // dead-letter queue) and the bucket, as wrangler.toml declares them.
    queueProducers: Object.fromEntries((treeConfig.queues?.producers ?? []).map((q) => [q.binding, q.queue])),
    queueConsumers: Object.fromEntries(
      (treeConfig.queues?.consumers ?? []).map((q) => [
        q.queue,
        {
          maxBatchSize: q.max_batch_size,
          maxBatchTimeout: q.max_batch_timeout,
          maxRetries: q.max_retries,
          retryDelay: q.retry_delay,
          deadLetterQueue: q.dead_letter_queue,
        },
      ]),
    ),
    r2Buckets: (treeConfig.r2_buckets ?? []).map((b) => b.binding),
    bindings: { ...treeConfig.vars, TOKEN_SECRET: "bench-token-secret-0123456789abcdef", ADMIN_TOKEN: ADMIN, ...vars },
  });
  return { ...worker, admin: ADMIN, spreadMintAddresses: true, source };
}
