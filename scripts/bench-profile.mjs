#!/usr/bin/env node
// `npm run bench:profile`: where a publish path's CPU goes, function by function, from a V8 CPU
// profile of the Worker's isolate under load — and, with `--against <ref>`, the same for an older
// commit in the same run, so a regression can be traced to the functions whose self time grew.
//
// Starts Floodgate in workerd straight to the Worker (lib/workerd.mjs) with its inspector open,
// sets up one scenario of `npm run bench` (same tokens, drop rates and subscribers), drives it with
// autocannon for a second to warm it, then records a profile over the DevTools protocol
// (Profiler.start/stop over the inspector's WebSocket) while autocannon drives it for --seconds.
// Self time is summed per function and per source file (the bundle's `// path` comments map a
// profile line back to the file it came from) and printed as µs per request and as a share of the
// isolate's busy time: shares within one profile hold on a loaded machine, µs per request do not.
// The whole profile is written as a .cpuprofile (Chrome DevTools, Performance → Load profile).
//
// What the profile sees: the JavaScript thread of the Worker's isolate, with the runtime's work on
// behalf of a JS call (building a Response, an RPC, a SQLite statement) counted in the calling
// function, garbage collection as "(garbage collector)", and runtime work outside any JS frame (the
// event loop, sockets) as "(program)". Durable Objects run in the same isolate locally, so their
// code is in the profile too. CPU spent on other threads of workerd is not (lib/workerd.mjs's
// cpuMicros counts every thread).
//
// Options: --scenario deny|drop50|drop50sum|pub10|crowd|crowdcold (default deny), --seconds N (default 5), --connections
// N (default 16), --subscribers N (default 10), --against <ref> (profile that commit too, one after
// the other, twice each in turn: A B A B), --top N (functions shown, default 25), --interval µs
// (sampling interval, default 200), --out DIR (where the .cpuprofile files go, default the system's
// temporary directory).
import { writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { COLD_PUBLISHES, load, median, publishOpts, setRate, webSocketSubscribers } from "./lib/bench.mjs";
import { refTree } from "./lib/bench-ref.mjs";
import { options } from "./lib/options.mjs";
import { mintToken } from "./lib/tokens.mjs";
import { startFloodgate } from "./lib/workerd.mjs";

const opts = options("bench:profile", {
  scenario: "deny",
  seconds: 5,
  connections: 16,
  subscribers: 10,
  against: "",
  top: 25,
  interval: 200,
  out: tmpdir(),
});
const SCENARIOS = ["deny", "drop50", "drop50sum", "pub10", "crowd", "crowdcold"];
/** crowdcold: crowds of this many subjects never charged before, each publishing COLD_PUBLISHES times in turn. */
const COLD_SUBJECTS = 500;
const COLD_CROWDS = 4;
if (!SCENARIOS.includes(opts.scenario)) {
  console.error(`floodgate bench:profile: --scenario must be one of ${SCENARIOS.join(", ")}`);
  process.exit(2);
}
const INSPECTOR_PORT = 9400 + (process.pid % 500);
const channels = ["public:bench.*"];
const NO_DEFAULT_LIMITS = {
  PUBLISH_RATE: "",
  PUBLISH_BURST: "",
  READ_RATE: "",
  MAX_SUBSCRIPTIONS_PER_CLIENT: "100000",
  ANONYMOUS_SHARE: "1",
  MAX_CONNECTIONS_PER_CLIENT: "100000",
  // drop50sum's channel keys each drop for its summary (as `npm run bench`'s Worker does); no other has a rule.
  THROTTLE_SUMMARY: JSON.stringify({ "public:bench.halfsum": "/emoji" }),
};

/** A CDP session on the inspector target named `id` (workerd names the Worker's `core:user:<name>`). */
async function devtools(port, id) {
  const targets = await (await fetch(`http://127.0.0.1:${port}/json`)).json();
  const target = targets.find((t) => t.id === id);
  if (!target) throw new Error(`no inspector target ${id} (have ${targets.map((t) => t.id).join(", ")})`);
  const ws = new WebSocket(target.webSocketDebuggerUrl);
  await new Promise((resolve, reject) => {
    ws.onopen = resolve;
    ws.onerror = () => reject(new Error(`cannot open ${target.webSocketDebuggerUrl}`));
  });
  let next = 1;
  const pending = new Map();
  ws.onmessage = (e) => {
    const msg = JSON.parse(e.data);
    if (msg.id && pending.has(msg.id)) {
      const { resolve, reject } = pending.get(msg.id);
      pending.delete(msg.id);
      if (msg.error) reject(new Error(`${msg.error.message} (${msg.error.code})`));
      else resolve(msg.result);
    }
  };
  return {
    send: (method, params = {}) =>
      new Promise((resolve, reject) => {
        const id = next++;
        pending.set(id, { resolve, reject });
        ws.send(JSON.stringify({ id, method, params }));
      }),
    close: () => ws.close(),
  };
}

/** The scenario on `fg`: { url, opts, close }, as `npm run bench` sets it up. */
async function scenario(fg, id) {
  if (id === "deny") {
    const { path, ...o } = publishOpts(
      await mintToken(fg, { sub: "flood", channels, rl: "1/h" }),
      "public:bench.flood",
    );
    return { url: fg.base + path, opts: o, close: () => {} };
  }
  if (id === "crowdcold") {
    // COLD_CROWDS crowds of new subjects one after the other, each subject publishing COLD_PUBLISHES
    // times in turn (subject k's first publish is request k of its crowd), as `npm run bench`'s
    // crowdcold slices: the profiled run is counted (`amount`), so first contacts are a third of it.
    const crowds = [];
    for (let g = 0; g < COLD_CROWDS; g++) {
      const tokens = [];
      for (let k = 0; k < COLD_SUBJECTS; k++)
        tokens.push(await mintToken(fg, { sub: `cold${g}-${k}`, channels, rl: "1000000/s" }));
      crowds.push(tokens);
    }
    const { close } = await webSocketSubscribers(fg.base, "public:bench.crowd", 1);
    const warm = await mintToken(fg, { sub: "warm", channels, rl: "1000000/s" });
    let i = 0;
    const body = JSON.stringify({ emoji: "🔥", at: 1 });
    const perCrowd = COLD_SUBJECTS * COLD_PUBLISHES;
    const setupRequest = (req) => {
      const n = i++;
      const crowd = crowds[Math.floor(n / perCrowd) % COLD_CROWDS];
      return {
        ...req,
        method: "POST",
        path: "/v1/publish/public:bench.crowd",
        headers: { authorization: `Bearer ${crowd[n % COLD_SUBJECTS]}`, "content-type": "application/json" },
        body,
      };
    };
    const { path, ...warmOpts } = publishOpts(warm, "public:bench.crowd");
    return {
      url: fg.base,
      opts: { requests: [{ setupRequest }] },
      amount: perCrowd * COLD_CROWDS,
      // The warm-up must not touch the crowds: one subject on the same channel.
      warmUp: { url: fg.base + path, opts: warmOpts },
      close,
    };
  }
  if (id === "crowd") {
    const tokens = [];
    for (let k = 0; k < 500; k++) tokens.push(await mintToken(fg, { sub: `spread${k}`, channels, rl: "1000000/s" }));
    const { close } = await webSocketSubscribers(fg.base, "public:bench.crowd", 1);
    let i = 0;
    const body = JSON.stringify({ emoji: "🔥", at: 1 });
    const setupRequest = (req) => ({
      ...req,
      method: "POST",
      path: "/v1/publish/public:bench.crowd",
      headers: { authorization: `Bearer ${tokens[i++ % tokens.length]}`, "content-type": "application/json" },
      body,
    });
    return { url: fg.base, opts: { requests: [{ setupRequest }] }, close };
  }
  // pub10, drop50 and drop50sum: the channel each publishes to, and its drop rate.
  const [channel, rate] = {
    pub10: ["public:bench.ten", 0],
    drop50: ["public:bench.half", 0.5],
    drop50sum: ["public:bench.halfsum", 0.5],
  }[id];
  if (rate > 0) await setRate(fg, channel, rate);
  const { close } = await webSocketSubscribers(fg.base, channel, opts.subscribers);
  const { path, ...o } = publishOpts(await mintToken(fg, { sub: id, channels, rl: "1000000/s" }), channel);
  return { url: fg.base + path, opts: o, close };
}

/** Maps a line of the bundle to the source file it came from (esbuild's `// path` comments). */
function fileOfLine(source) {
  const starts = [];
  source.split("\n").forEach((line, i) => {
    // An older tree links this one's node_modules, so its dependencies' paths climb out of it first.
    const m = /^\/\/ (?:\.\.\/)*(?:[\w.-]+\/)*?((?:node_modules|src|functions|packages)\/\S+\.[cm]?[jt]s)$/.exec(line);
    if (m) starts.push([i, m[1].replace(/^node_modules\/((?:@[\w.-]+\/)?[\w.-]+)\/.*/, "$1 (dependency)")]);
  });
  return (line) => {
    let lo = 0;
    let hi = starts.length - 1;
    let found = "(bundle prelude)";
    while (lo <= hi) {
      const mid = (lo + hi) >> 1;
      if (starts[mid][0] <= line) {
        found = starts[mid][1];
        lo = mid + 1;
      } else hi = mid - 1;
    }
    return found;
  };
}

/** One profiled run of the scenario on one tree: self time per function and per file (µs). */
async function profileOnce(label, tree) {
  const fg = await startFloodgate(NO_DEFAULT_LIMITS, undefined, { tree, inspectorPort: INSPECTOR_PORT });
  try {
    const s = await scenario(fg, opts.scenario);
    if (opts.scenario === "crowd") await load(s.url, s.opts, { seconds: 2, connections: opts.connections });
    const warm = s.warmUp ?? s;
    await load(warm.url, warm.opts, { seconds: 1, connections: opts.connections }); // warm-up: compile, first calls
    const cdp = await devtools(INSPECTOR_PORT, "core:user:floodgate");
    await cdp.send("Profiler.enable");
    await cdp.send("Profiler.setSamplingInterval", { interval: opts.interval });
    await cdp.send("Profiler.start");
    const r = await load(s.url, s.opts, { seconds: opts.seconds, connections: opts.connections, amount: s.amount });
    const { profile } = await cdp.send("Profiler.stop");
    cdp.close();
    s.close();
    const requests = Object.values(r.statuses).reduce((a, n) => a + n, 0);
    const file = join(opts.out, `floodgate-${opts.scenario}-${label}-${Date.now()}.cpuprofile`);
    writeFileSync(file, JSON.stringify(profile));
    return { ...summarise(profile, fileOfLine(fg.source)), requests, statuses: r.statuses, file };
  } finally {
    await fg.stop();
  }
}

/** Self time (µs) per function and per file, and the busy total (everything but "(idle)"). */
function summarise(profile, fileOf) {
  const self = new Map(profile.nodes.map((n) => [n.id, 0]));
  // A sample's delta is the time since the one before. Busy, the isolate is sampled every interval;
  // a delta far longer is time it spent idle with no "(idle)" sample to say so (the gap after the
  // load ends, charged to whatever ran next: one 171 ms gap put a metrics flush's stub at 28 µs per
  // request), so at most IDLE_GAP of it counts.
  const IDLE_GAP = 10 * opts.interval;
  for (let i = 0; i < profile.samples.length; i++) {
    const id = profile.samples[i];
    self.set(id, self.get(id) + Math.min(profile.timeDeltas[i] ?? 0, IDLE_GAP));
  }
  const byFunction = new Map();
  const byFile = new Map();
  const byArea = new Map();
  let busy = 0;
  for (const n of profile.nodes) {
    const t = self.get(n.id);
    if (!t) continue;
    const { functionName, url, lineNumber } = n.callFrame;
    if (functionName === "(idle)") continue;
    busy += t;
    // Runtime entries: "(program)", "(garbage collector)", and builtins the runtime calls into with
    // no script of their own (named, like `json`, or not).
    const native = !url || functionName.startsWith("(");
    const file = native ? null : url.endsWith("index.mjs") ? fileOf(lineNumber) : url;
    const name = native ? functionName || "(native, unnamed)" : functionName || "(anonymous)";
    // Functions by name and the file they are in; files move between commits (src/http.ts became
    // src/worker/http/body.ts), so the per-function table keys on the name and the dependency or "src".
    // An anonymous function is told apart by its file only.
    const key = native
      ? `${name} (runtime)`
      : `${name} ${file.includes("(dependency)") || name === "(anonymous)" ? file : "(own)"}`;
    byFunction.set(key, (byFunction.get(key) ?? 0) + t);
    const fileKey = native ? `${name} (runtime)` : file;
    byFile.set(fileKey, (byFile.get(fileKey) ?? 0) + t);
    (files.get(key) ?? files.set(key, new Set()).get(key)).add(native ? "" : file);
    const area = native ? `${name} (runtime)` : areaOf(file);
    byArea.set(area, (byArea.get(area) ?? 0) + t);
  }
  return { byFunction, byFile, byArea, busy };
}
/**
 * The part of the Worker a file belongs to (docs/contributing.md's layout: src/<area>/, functions/),
 * so commits from before the layout (flat src/*.ts) compare area by area.
 */
function areaOf(file) {
  if (file.includes("(dependency)")) return file;
  // Today's layout (src/worker/<part>/, one folder per object, src/wire/, src/settings/), then the older one.
  const m =
    /^src\/(worker\/[\w-]+|worker|channel|relay|limiter|metrics|active-channels|refresh-ledger|settings|wire|platform)\//.exec(
      file,
    ) ?? /^src\/(auth|channel|delivery|http|platform|rate-limit|record|throttle)\//.exec(file);
  if (m) return `src/${m[1]}/`;
  if (file.startsWith("functions/")) return "functions/";
  const flat = /^src\/(?:routes\/)?([\w-]+)\.ts$/.exec(file)?.[1];
  const FLAT = {
    http: "http",
    errors: "http",
    app: "http",
    "app-env": "http",
    publish: "http",
    subscribe: "http",
    operator: "http",
    tokens: file.includes("routes/") ? "http" : "auth",
    "refresh-ledger": "auth",
    "channel-object": "channel",
    channels: "channel",
    "publish-batcher": "channel",
    "limiter-gate": "rate-limit",
    "rate-limiter": "rate-limit",
    "token-bucket": "rate-limit",
    limits: "rate-limit",
    budgets: "rate-limit",
    services: "platform",
    metrics: "platform",
    config: "platform",
    coalescer: "platform",
    durations: "platform",
    "active-channels": "throttle",
    "sampler-run": "throttle",
  };
  return flat && FLAT[flat] ? `src/${FLAT[flat]}/` : file;
}

/** Every function key's source files, over all profiles (for the table's labels). */
const files = new Map();

const trees = [{ label: "current", tree: undefined }];
if (opts.against) {
  const ref = refTree(opts.against);
  trees.push({ label: ref.short, tree: ref.tree });
}
// A B A B: each tree twice, alternating, so neither always gets the quieter minute.
const results = new Map(trees.map((t) => [t.label, []]));
for (let pass = 0; pass < (opts.against ? 2 : 1); pass++) {
  for (const t of trees) {
    const r = await profileOnce(t.label, t.tree);
    results.get(t.label).push(r);
    console.log(
      `  ${t.label} pass ${pass + 1}: ${r.requests} requests ${JSON.stringify(r.statuses)}, profile ${r.file}`,
    );
  }
}

/** Sums the passes of one tree: µs per request and share of busy time, per key of `field`. */
function merged(label, field) {
  const list = results.get(label);
  const requests = list.reduce((a, r) => a + r.requests, 0);
  const busy = list.reduce((a, r) => a + r.busy, 0);
  const sums = new Map();
  for (const r of list) for (const [k, t] of r[field]) sums.set(k, (sums.get(k) ?? 0) + t);
  return {
    requests,
    busy,
    perRequest: (k) => (sums.get(k) ?? 0) / requests,
    share: (k) => (sums.get(k) ?? 0) / busy,
    keys: [...sums.keys()],
    sums,
  };
}

const fmt = (x, d = 1) => (Number.isFinite(x) ? x.toFixed(d) : "–");
const labels = trees.map((t) => t.label);
console.log(
  `\nbench:profile ${opts.scenario}, ${opts.seconds} s × ${opts.against ? 2 : 1} per tree, ${opts.connections} connections, sampling every ${opts.interval} µs`,
);
const TITLES = { byArea: "area (src/<area>/, functions/)", byFile: "source file", byFunction: "function (file)" };
for (const field of ["byArea", "byFile", "byFunction"]) {
  const m = new Map(labels.map((l) => [l, merged(l, field)]));
  const first = m.get(labels[0]);
  // Ranked by the largest self time per request on either side, so what grew and what vanished show.
  const keys = [...new Set(labels.flatMap((l) => m.get(l).keys))].sort(
    (a, b) =>
      Math.max(...labels.map((l) => m.get(l).perRequest(b))) - Math.max(...labels.map((l) => m.get(l).perRequest(a))),
  );
  console.log(
    `\n| ${TITLES[field]} | ${labels.map((l) => `${l} µs/req | ${l} share`).join(" | ")}${labels.length > 1 ? " | Δ µs/req |" : ""}`,
  );
  console.log(`|---|${labels.map(() => "---:|---:").join("|")}|${labels.length > 1 ? "---:|" : ""}`);
  for (const k of keys.slice(0, field === "byFunction" ? opts.top : Math.max(opts.top, 20))) {
    const cells = labels.map((l) => `${fmt(m.get(l).perRequest(k), 2)} | ${fmt(100 * m.get(l).share(k))}%`);
    const delta =
      labels.length > 1 ? ` ${fmt(m.get(labels[0]).perRequest(k) - m.get(labels[1]).perRequest(k), 2)} |` : "";
    const where = field === "byFunction" && k.endsWith("(own)") ? ` — ${[...files.get(k)].join(", ")}` : "";
    console.log(`| ${k}${where} | ${cells.join(" | ")} |${delta}`);
  }
  console.log(
    `| busy total | ${labels.map((l) => `${fmt(m.get(l).busy / m.get(l).requests, 2)} | 100%`).join(" | ")} |${labels.length > 1 ? ` ${fmt(first.busy / first.requests - m.get(labels[1]).busy / m.get(labels[1]).requests, 2)} |` : ""}`,
  );
}
console.log(
  `\nrequests per profiled run: ${labels.map((l) => `${l} ${median(results.get(l).map((r) => r.requests))}`).join(", ")}`,
);
