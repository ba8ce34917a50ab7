// `npm run bench:analytics -- --faults`: the record of dropped messages through storage outages
// (docs/benchmarks.md, "The record through storage faults"). The whole Worker with its local drops
// queue (real retry delays, dead-letter queue) and bucket, behind an entry that makes the R2 binding
// fail every call during one window and the analytics channel's object refuse every append during
// another (--outage-seconds each, default 60, one after the other), while drops arrive at --rate per
// second (default 50) from before the first outage to after the second. Then it waits until every
// drop is recorded or a counted failure (or nothing moved for --settle-seconds), and prints dropped,
// recorded, failed, unaccounted (must be 0), unsettled, and the copies the record and the analytics
// channel hold for the run's channel, each with how many were there twice (must be 0).
import { load, publishOpts, setRate } from "../lib/bench.mjs";
import { root } from "../lib/root.mjs";
import { mintToken } from "../lib/tokens.mjs";
import { ANALYTICS_CHANNEL, startFloodgate } from "../lib/workerd.mjs";
import { counts, settled } from "./record-counts.mjs";

/** The Worker's entry with faults: its own classes and handlers, the bucket and the append failing on windows of the clock. */
const entry = {
  stdin: {
    contents: `export * from "./src/index";
import worker, { ChannelObject as RealChannelObject } from "./src/index";

const down = (env, kind) => {
  const now = Date.now();
  return now >= Number(env["FAULT_" + kind + "_FROM"]) && now < Number(env["FAULT_" + kind + "_UNTIL"]);
};

function flakyBucket(env) {
  const real = env.RECORD_BUCKET;
  return new Proxy(real, {
    get(target, prop) {
      const v = Reflect.get(target, prop);
      if (typeof v !== "function") return v;
      return (...args) => (down(env, "R2") ? Promise.reject(new Error("r2 unavailable (injected)")) : v.apply(target, args));
    },
  });
}

const wrapped = new WeakMap();
function withFaults(env) {
  let e = wrapped.get(env);
  if (!e) {
    const bucket = flakyBucket(env);
    e = new Proxy(env, { get: (t, p) => (p === "RECORD_BUCKET" ? bucket : Reflect.get(t, p)) });
    wrapped.set(env, e);
  }
  return e;
}

export class ChannelObject extends RealChannelObject {
  appendCopies(...args) {
    if (down(this.env, "ANALYTICS")) throw new Error("analytics object down (injected)");
    return super.appendCopies(...args);
  }
}

export default {
  fetch: (request, env, ctx) => worker.fetch(request, withFaults(env), ctx),
  queue: (batch, env, ctx) => worker.queue(batch, withFaults(env), ctx),
  scheduled: (controller, env, ctx) => worker.scheduled(controller, withFaults(env), ctx),
};`,
    resolveDir: root,
    loader: "js",
  },
};

/** The ids of every copy of `source` on the analytics channel, paged as the docs say. */
async function analyticsIds(fg, token, source) {
  const ids = [];
  for (let after = 0; ; ) {
    const res = await fetch(
      `${fg.base}/v1/history/${ANALYTICS_CHANNEL}?after=${after}&limit=1000&source_channel=${source}`,
      { headers: { authorization: `Bearer ${token}`, "cf-connecting-ip": "198.51.100.9" } },
    );
    if (res.status !== 200) throw new Error(`history: ${res.status} ${await res.text()}`);
    const { messages } = await res.json();
    if (messages.length === 0) return ids;
    for (const m of messages) ids.push(m.id);
    after = messages.at(-1).seq;
  }
}

/** The ids of every copy of `source` in the record (the export reads the bucket). */
async function recordIds(fg, source, from, to) {
  const res = await fetch(`${fg.base}/v1/admin/analytics/export?from=${from}&to=${to}&source_channel=${source}`, {
    headers: { authorization: `Bearer ${fg.admin}` },
  });
  if (res.status !== 200) throw new Error(`export: ${res.status} ${await res.text()}`);
  return (await res.text())
    .split("\n")
    .filter(Boolean)
    .map((l) => JSON.parse(l).id);
}

const twice = (ids) => ids.length - new Set(ids).size;

export async function runFaults(opts) {
  const outage = opts["outage-seconds"] * 1000;
  const lead = 10_000;
  const t0 = Date.now();
  const r2 = [t0 + lead, t0 + lead + outage];
  const analytics = [r2[1] + lead, r2[1] + lead + outage];
  const fg = await startFloodgate(
    {
      FAULT_R2_FROM: String(r2[0]),
      FAULT_R2_UNTIL: String(r2[1]),
      FAULT_ANALYTICS_FROM: String(analytics[0]),
      FAULT_ANALYTICS_UNTIL: String(analytics[1]),
    },
    entry,
  );
  try {
    const channel = "public:bench.faults";
    const token = await mintToken(fg, { sub: "bench-faults", channels: ["public:bench.*"], rl: "1000000/s" });
    const reader = await mintToken(fg, { sub: "bench-analyst", channels: [ANALYTICS_CHANNEL], scopes: ["subscribe"] });
    await setRate(fg, channel, 1);
    const before = await counts(fg);
    const seconds = Math.ceil((analytics[1] + lead - Date.now()) / 1000);
    console.log(
      `record through storage faults: R2 down ${opts["outage-seconds"]} s, then the analytics object ${opts["outage-seconds"]} s, drops at ${opts.rate}/s for ${seconds} s, Node ${process.version}`,
    );
    const { path, ...publish } = publishOpts(token, channel);
    const r = await load(
      fg.base + path,
      { ...publish, overallRate: opts.rate },
      { seconds, connections: Math.max(1, Math.min(20, Math.ceil(opts.rate / 10))) },
    );
    const loadEnd = Date.now();
    const d = await settled(fg, before, { quietMs: opts["settle-seconds"] * 1000, pollMs: 1000 });
    const settledAfter = ((Date.now() - loadEnd) / 1000).toFixed(0);
    // The live view settles after the record (its appends come after the write): every drop is on it
    // or counted as its failure (those that failed before the queue too), but for unsettled sends.
    let live = [];
    for (let i = 0; i < 60; i++) {
      live = await analyticsIds(fg, reader, channel);
      if (new Set(live).size + d.analyticsFailed >= d.dropped - d.unsettled) break;
      await new Promise((res) => setTimeout(res, 1000));
    }
    const record = await recordIds(fg, channel, t0 - 60_000, Date.now() + 60_000);
    console.log(
      "| dropped | recorded | failed | unaccounted | unsettled | in the record (twice) | on the analytics channel (twice) | live view missed | settled after load (s) | statuses |",
    );
    console.log("|---:|---:|---:|---:|---:|---:|---:|---:|---:|---|");
    console.log(
      `| ${d.dropped} | ${d.recorded} | ${d.failed} | ${d.dropped - d.recorded - d.failed} | ${d.unsettled} | ${record.length} (${twice(record)}) | ${live.length} (${twice(live)}) | ${d.analyticsFailed} | ${settledAfter} | ${JSON.stringify(r.statuses)} |`,
    );
    const unaccounted = d.dropped - d.recorded - d.failed;
    if (unaccounted !== 0 || twice(record) > 0 || twice(live) > 0) process.exitCode = 1;
  } finally {
    await fg.stop();
  }
}
