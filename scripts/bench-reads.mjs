#!/usr/bin/env node
// `npm run bench:reads`: reads cannot starve a channel (docs/benchmarks.md, "Reads beside a hot
// channel"). One hot channel (--subscribers WebSocket subscribers) takes --rate publishes/s; its
// publish latency is measured alone, then while --readers clients, each from its own address, read
// its history (newest 100) and presence in turn at --read-rate each per second (the shipped read
// budget: 20/s). Each round (--rounds, --seconds a phase) measures the publishes alone, while the same
// crowd is refused at the read door of a private channel (the read budget and the token check: the
// Worker's work of a read, whose isolate here shares one workerd thread with the channel's object,
// but no object asked), and while it reads this channel. The figures are the medians over rounds of
// p99 with readers on the channel over p99 alone (the bound of docs/api.md: within 2×) and over p99
// with readers at the door (what reading costs beyond the Worker's share),
// beside the publishes that failed (must be 0), the reads' statuses, and the channel-object calls per
// second the reads cost (from /metrics). --against <ref> runs the same on an older commit's tree, in the same run
// (main: every read reaches the channel's object). Prints the machine's load average with each row.
// --split (the production shape) sends the readers to a second workerd process running the same
// Worker, whose channel-side objects are the first process's (bound across processes by name): the
// Worker's share of a read then runs on its own thread, as Workers' isolates run apart from a
// channel's object in production, and only what a read asks of the channel lands on the channel's.
import { mkdtempSync } from "node:fs";
import { loadavg, tmpdir } from "node:os";
import { join } from "node:path";
import autocannon from "autocannon";
import { median, metrics, publishOpts, webSocketSubscribers } from "./lib/bench.mjs";
import { refTree } from "./lib/bench-ref.mjs";
import { options } from "./lib/options.mjs";
import { mintToken } from "./lib/tokens.mjs";
import { startFloodgate } from "./lib/workerd.mjs";

const opts = options("bench:reads", {
  rate: 200,
  readers: 50,
  "read-rate": 20,
  subscribers: 10,
  seconds: 8,
  rounds: 3,
  against: "",
  split: false,
});

/** The objects that are the channel's (its order, relays, registry, Pusher hosts): with --split, the readers' Worker reaches them in the first process. */
const CHANNEL_SIDE = ["CHANNEL", "RELAY", "ACTIVE_CHANNELS", "CONNECTION_HOST", "HOST_DIRECTORY"];

const load = () =>
  loadavg()
    .map((x) => x.toFixed(2))
    .join(" ");

const CHANNEL_CALLS = 'floodgate_object_calls_total{object="channel"}';

/** Publishes at `rate`/s for `seconds`: latency percentiles and statuses. */
async function publishes(fg, token, channel) {
  const { path, ...publish } = publishOpts(token, channel);
  const r = await autocannon({
    url: fg.base + path,
    ...publish,
    connections: 10,
    overallRate: opts.rate,
    duration: opts.seconds,
  });
  const statuses = Object.fromEntries(Object.entries(r.statusCodeStats ?? {}).map(([code, v]) => [code, v.count]));
  return { p50: r.latency.p50, p99: r.latency.p99, statuses, failed: r.errors + r.timeouts + (r.non2xx ?? 0) };
}

/**
 * `readers` clients, each its own address, reading history and presence at `read-rate`/s together:
 * two runs side by side (autocannon sets a connection's headers for one request path), the n-th
 * connection of each from the n-th address, at half the rate each. Resolves to the statuses.
 */
async function readers(base, channel, seconds = opts.seconds + 1) {
  const run = (path) => {
    let n = 0;
    return autocannon({
      url: base + path,
      connections: opts.readers,
      connectionRate: opts["read-rate"] / 2,
      duration: seconds,
      setupClient: (client) => {
        n++;
        client.setHeaders({ "cf-connecting-ip": `203.0.${(n >> 8) & 255}.${n & 255}` });
      },
    });
  };
  const runs = await Promise.all([run(`/v1/history/${channel}`), run(`/v1/presence/${channel}`)]);
  const statuses = {};
  for (const r of runs)
    for (const [code, v] of Object.entries(r.statusCodeStats ?? {})) statuses[code] = (statuses[code] ?? 0) + v.count;
  return statuses;
}

async function measure(label, tree) {
  const registry = opts.split ? mkdtempSync(join(tmpdir(), "floodgate-registry-")) : undefined;
  const fg = await startFloodgate({}, undefined, { ...(tree ? { tree } : {}), registry });
  // The readers' Worker: the same one, or (--split) its twin in a second process.
  const door = opts.split
    ? await startFloodgate({}, undefined, {
        ...(tree ? { tree } : {}),
        registry,
        name: "floodgate-readers",
        objectsOf: { name: "floodgate", bindings: CHANNEL_SIDE },
      })
    : fg;
  try {
    const channel = "public:bench.hot";
    const token = await mintToken(fg, { sub: "bench-hot", channels: ["public:bench.*"], rl: "1000000/s" });
    const subs = await webSocketSubscribers(fg.base, channel, opts.subscribers);
    // Warm-up: the publishes, and the readers' path (with --split, the second process's first reads
    // open its line to the first and compile its code: a first round without this measured that).
    await Promise.all([publishes(fg, token, channel), readers(door.base, channel, 3)]);
    const calls = async () =>
      ((await metrics(fg))[CHANNEL_CALLS] ?? 0) + (door === fg ? 0 : ((await metrics(door))[CHANNEL_CALLS] ?? 0));
    /** The hot channel's publishes while `readChannel` is read (none: alone), and the channel calls they made. */
    const phase = async (readChannel) => {
      const c0 = await calls();
      const reading = readChannel ? readers(door.base, readChannel) : Promise.resolve({});
      const pub = await publishes(fg, token, channel);
      const reads = await reading;
      return { ...pub, reads, calls: (await calls()) - c0 };
    };
    const rows = [];
    for (let round = 0; round < opts.rounds; round++) {
      const alone = await phase(null);
      // The same crowd at the read door of a private channel without a token: the read budget and the
      // token check, answered 401 before any object is asked — the Worker's share of a read.
      const elsewhere = await phase("private:bench.closed.door");
      const here = await phase(channel);
      const readCount = Object.values(here.reads).reduce((a, b) => a + b, 0);
      // What the reads cost the channel's objects: the calls beyond those of the same publishes alone.
      const readCalls = Math.max(0, Math.round((here.calls - alone.calls) / opts.seconds));
      rows.push({ alone, elsewhere, here });
      console.log(
        `| ${label} | ${round + 1} | ${alone.p50} | ${alone.p99} | ${elsewhere.p99} | ${here.p50} | ${here.p99} | ${(here.p99 / Math.max(1, alone.p99)).toFixed(2)} | ${(here.p99 / Math.max(1, elsewhere.p99)).toFixed(2)} | ${alone.failed + elsewhere.failed + here.failed} | ${Math.round(readCount / (opts.seconds + 1))} | ${JSON.stringify(here.reads)} | ${readCalls} | ${load()} |`,
      );
    }
    subs.close();
    return {
      alone: median(rows.map((r) => r.here.p99 / Math.max(1, r.alone.p99))),
      elsewhere: median(rows.map((r) => r.here.p99 / Math.max(1, r.elsewhere.p99))),
    };
  } finally {
    if (door !== fg) await door.stop();
    await fg.stop();
  }
}

console.log(
  `reads beside a hot channel: ${opts.rate} publishes/s, ${opts.subscribers} subscribers; ${opts.readers} readers at ${opts["read-rate"]}/s each (history and presence in turn)${opts.split ? " through a second Worker process (--split)" : ", one workerd process"}, ${opts.seconds} s a phase, Node ${process.version}, load average ${load()}`,
);
console.log(
  "| tree | round | p50 alone (ms) | p99 alone (ms) | p99, readers refused at the door (ms) | p50, readers on the channel (ms) | p99, readers on the channel (ms) | p99 ratio to alone | p99 ratio to readers at the door | publishes failed | reads/s | read statuses | channel-object calls/s for reads | load average |",
);
console.log("|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---|---:|---|");
const ours = await measure("this tree");
let theirs = null;
if (opts.against) {
  const ref = refTree(opts.against);
  theirs = await measure(ref.short, ref.tree);
}
const summary = (r, name) =>
  `${r.alone.toFixed(2)} to alone, ${r.elsewhere.toFixed(2)} to readers at the door (${name})`;
console.log(
  `median p99 with readers on the channel: ${summary(ours, "this tree")}${theirs === null ? "" : `; ${summary(theirs, opts.against)}`}; load average ${load()}`,
);
