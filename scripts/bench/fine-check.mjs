// `npm run bench`'s fine check: the paths its targets (targets.mjs) name, each in a Worker of its
// own, measured in short slices against the bare routes of the same round, and with `--against` the
// same paths on an older commit beside them; then the fine check's tables.
import {
  COLD_PUBLISHES,
  load,
  median,
  metrics,
  publishOpts,
  setRate,
  startRecipe,
  sumStatuses,
  webSocketSubscribers,
} from "../lib/bench.mjs";
import { PUSHER_APP, pusherEvents, pusherSubscribers } from "../lib/pusher-app.mjs";
import { mintToken } from "../lib/tokens.mjs";
import { cpuMicros, startFloodgate } from "../lib/workerd.mjs";
import { COUNTERS, measured } from "./rounds.mjs";
import { fmt } from "./table.mjs";
import {
  channels,
  generous,
  many,
  mintCrowd,
  mintMany,
  NO_DEFAULT_LIMITS,
  PUSHER_BENCH_CHANNEL,
  RECIPE_SUBSCRIBERS,
  touchAll,
  withoutPath,
} from "./workload.mjs";

/**
 * What one slice of the fine check asks autocannon for, in seconds. Its connections keep going until
 * autocannon's next 1 s sample, so a slice is about 1 s of load, timed to its last answer (lib/bench.mjs).
 */
const FINE_SECONDS = 0.6;
// The routes `--against` compares by default (the ones a change to the publish path can move): a
// delivered publish with 1 and with 10 subscribers, drop rate 0.5 with 10, the deny flood, the crowd
// warm and cold, and the Pusher door's publish to 10 connections.
const AGAINST_ROUTES = ["pub1", "pub10", "drop50", "deny", "crowd", "crowdcold", "pusher10"];

/** A Floodgate of its own with `n` WebSocket subscribers on `channel`, publishing as one subject. */
async function floodgatePath(channel, { n = 1, rl = generous, rate = 0, tree } = {}) {
  const worker = await startFloodgate(NO_DEFAULT_LIMITS, undefined, { tree });
  if (rate) await setRate(worker, channel, rate);
  const sub = n ? await webSocketSubscribers(worker.base, channel, n) : null;
  const { path, ...opts } = publishOpts(await mintToken(worker, { sub: `fine-${channel}`, channels, rl }), channel);
  return {
    url: worker.base + path,
    pid: worker.pid,
    opts,
    dispose: async () => {
      sub?.close();
      await worker.stop();
    },
  };
}

/**
 * The literal recipe (lib/bench-recipe-worker.mjs) in a workerd of its own, publishing to `channel`
 * with `n` subscribers; `rate` is its KV drop rate, `gcraIntervalMs` its limiter's interval.
 */
async function recipePath(
  channel,
  { n = RECIPE_SUBSCRIBERS, rate = 0, subject = "recipe-subject", gcraIntervalMs } = {},
) {
  const worker = await startRecipe({ gcraIntervalMs });
  if (rate) await (await worker.mf.getKVNamespace("THROTTLE_KV")).put(`throttleRate:${channel}`, String(rate));
  const sub = n ? await webSocketSubscribers(worker.base, channel, n) : null;
  return {
    url: `${worker.base}/v1/publish/${channel}`,
    pid: worker.pid,
    opts: withoutPath(publishOpts(subject, channel)),
    dispose: async () => {
      sub?.close();
      await worker.stop();
    },
  };
}

/** How often, and how idle, the fine check's workerds must be before a slice starts (see {@link untilQuiet}). */
const QUIET = { windowMs: 50, busyShare: 0.05, mostMs: 3000 };

/**
 * Waits until the fine check's workerds (`pids`) together use less than `QUIET.busyShare` of one core
 * over a `QUIET.windowMs` window, for at most `QUIET.mostMs`; resolves to { waited (ms), quiet (false:
 * it gave up at the cap) }. A path's work can outlast its slice — a `drop90` slice's workerd goes on
 * recording its drops (queue, R2, the analytics channel) for about 200 ms, 130 ms of CPU — and on two
 * cores that would run beside whichever slice came next: the order of the paths, not their code,
 * would move their throughput (`pub1` follows `drop90` in every other round, `recipe50` follows a
 * drop path in every round). Each path's CPU is counted in its own workerd either way.
 */
async function untilQuiet(pids) {
  const started = performance.now();
  const total = () => pids.reduce((sum, pid) => sum + cpuMicros(pid), 0);
  let before = total();
  let at = started;
  while (at - started < QUIET.mostMs) {
    await new Promise((res) => setTimeout(res, QUIET.windowMs));
    const [now, cpu] = [performance.now(), total()];
    // Against the window as it ran (a late timer makes it longer), in µs of CPU per ms.
    if (cpu - before < QUIET.busyShare * (now - at) * 1000) return { waited: now - started, quiet: true };
    [before, at] = [cpu, now];
  }
  return { waited: at - started, quiet: false };
}

/**
 * The fine check's paths: how to set each up (the bare ones share the reference Worker of the rounds:
 * `references` holds their requests). A Floodgate path takes the source tree to start (undefined:
 * this one; `--against`: the older commit's).
 */
function finePaths({ spread: SPREAD }, { bareScenario, barePost, bareWrite1 }) {
  return {
    bare: async () => ({ url: bareScenario.url, pid: bareScenario.pid, opts: bareScenario.opts }),
    post: async () => barePost,
    write1: async () => bareWrite1,
    deny: (tree) => floodgatePath("public:bench.flood", { n: 0, rl: "1/h", tree }),
    pub1: (tree) => floodgatePath("public:bench.one", { tree }),
    pub10: (tree) => floodgatePath("public:bench.ten", { n: RECIPE_SUBSCRIBERS, tree }),
    // The Pusher door's publish (a signed HTTP API event) to 10 Pusher connections: pub10's counterpart.
    pusher10: async (tree) => {
      const worker = await startFloodgate({ ...NO_DEFAULT_LIMITS, ...PUSHER_APP }, undefined, { tree });
      const sub = await pusherSubscribers(worker.base, PUSHER_BENCH_CHANNEL, RECIPE_SUBSCRIBERS);
      return {
        ...pusherEvents(worker, PUSHER_BENCH_CHANNEL),
        dispose: async () => {
          sub.close();
          await worker.stop();
        },
      };
    },
    drop50: (tree) => floodgatePath("public:bench.half", { n: RECIPE_SUBSCRIBERS, rate: 0.5, tree }),
    drop90: (tree) => floodgatePath("public:bench.ninety", { rate: 0.9, tree }),
    // The same shape as drop50 on a channel a THROTTLE_SUMMARY rule matches (the bench Worker's vars).
    drop50sum: (tree) => floodgatePath("public:bench.halfsum", { n: RECIPE_SUBSCRIBERS, rate: 0.5, tree }),
    // The crowd cold: every slice a crowd of new subjects, each publishing COLD_PUBLISHES times in
    // turn (subject k's first publish is request k), run to that count rather than for a duration, so
    // first contacts are a fixed share of the slice. Their throughput is requests over the slice's time.
    crowdcold: async (tree) => {
      const worker = await startFloodgate(NO_DEFAULT_LIMITS, undefined, { tree });
      const sub = await webSocketSubscribers(worker.base, "public:bench.crowd", 1);
      let generation = 0;
      return {
        ...many(worker, [], () => "public:bench.crowd"),
        countLimiter: true,
        amount: SPREAD * COLD_PUBLISHES,
        // The next slice's load options: a crowd of its own.
        prepare: async () =>
          many(worker, await mintCrowd(worker, `cold${generation++}-`, SPREAD), () => "public:bench.crowd").opts,
        dispose: async () => {
          sub.close();
          await worker.stop();
        },
      };
    },
    crowd: async (tree) => {
      const worker = await startFloodgate(NO_DEFAULT_LIMITS, undefined, { tree });
      const tokens = await mintMany(worker, SPREAD);
      const sub = await webSocketSubscribers(worker.base, "public:bench.crowd", 1);
      return {
        ...many(worker, tokens, () => "public:bench.crowd"),
        countLimiter: true,
        warm: () => touchAll(worker.base, tokens, () => "public:bench.crowd"),
        dispose: async () => {
          sub.close();
          await worker.stop();
        },
      };
    },
    // The peer limiter's deny flood: the recipe's GCRA object (Cloudflare's chat example) refusing
    // every publish of one subject, one object call each: deny's counterpart.
    recipedeny: () =>
      recipePath("public:bench.recipedeny", { n: 0, subject: "recipe-flooder", gcraIntervalMs: 3_600_000 }),
    // The literal recipe at drop rate 0.5 (its KV key, read on every publish): drop50's counterpart.
    recipe50: () => recipePath("public:bench.recipe50", { rate: 0.5 }),
    recipe10: () => recipePath("public:bench.recipe"),
  };
}

/**
 * The fine check: each path in a Worker (a workerd) of its own, so one path's background work never
 * lands in another's numbers, then `--fine` rounds of short closed-loop slices against the bare GET,
 * the bare POST and each path in turn (the order reversed every other round). A path's ratio is the
 * median over rounds of its slice against the reference's slice of the same round: slices 0.6 s apart
 * see the same machine, which over 2 s runs it often does not. The crowd's limiter calls are read
 * from its Worker's /metrics around each of its slices (`/metrics` flushes the isolate's counts).
 * `targets` are the targets to judge (targets.mjs), `has(id)` whether a scenario ran, `references`
 * the bare routes' requests ({ bareScenario, barePost, bareWrite1 }, scenarios.mjs). Resolves to the
 * figures, or null when there is nothing to check.
 */
export async function fineCheck(config, { targets, has, references }) {
  const { fine: FINE, connections: CONNECTIONS, ref: REF, wanted } = config;
  const FINE_PATHS = finePaths(config, references);
  const ids = new Set(["bare", "post"]);
  for (const id of ["deny", "pub1", "drop90"]) if (has(id)) ids.add(id);
  for (const t of targets) {
    ids.add(t.id);
    if (t.against) ids.add(t.against);
  }
  // With --against: the compared routes (those --only names, or all of them), each also on the ref.
  const compared = REF ? AGAINST_ROUTES.filter((id) => wanted(id)) : [];
  for (const id of compared) ids.add(id);
  if (!FINE || ids.size === 2) return null;
  const paths = [];
  for (const id of ids) paths.push({ id, ...(await FINE_PATHS[id]()) });
  for (const id of compared) paths.push({ id: `${id}@ref`, ...(await FINE_PATHS[id](REF.tree)) });
  const slice = { seconds: FINE_SECONDS, connections: CONNECTIONS };
  for (const p of paths) {
    await p.warm?.();
    if (p.prepare) p.opts = await p.prepare();
    await load(p.url, p.opts, p.amount ? { amount: p.amount, connections: CONNECTIONS } : slice); // warm-up: compile, first limiter call
    p.drivenAt = Date.now();
  }
  const slices = new Map(paths.map((p) => [p.id, []]));
  for (const p of paths)
    if (!p.pid) console.log(`fine check: no process found for ${p.id}; its quiet is not waited for`);
  const pids = [...new Set(paths.map((p) => p.pid).filter(Boolean))];
  let waited = 0;
  let neverQuiet = 0;
  for (let round = 0; round < FINE; round++) {
    for (const p of round % 2 ? [...paths].reverse() : paths) {
      // Local workerd evicts an object idle for about 10 s (see touchAll): a round on a busy machine
      // can take that long, so the crowd's objects are touched again once its last slice is 5 s old.
      if (p.warm && Date.now() - p.drivenAt > 5000) await p.warm();
      if (p.prepare) p.opts = await p.prepare();
      const quiet = await untilQuiet(pids);
      waited += quiet.waited;
      if (!quiet.quiet) neverQuiet++;
      const before = p.countLimiter ? await metrics(p.worker) : null;
      const r = await measured(p, 0, p.amount ? { amount: p.amount, connections: CONNECTIONS } : slice);
      p.drivenAt = Date.now();
      if (before) r.limiterCalls = (await metrics(p.worker))[COUNTERS.limiter] - (before[COUNTERS.limiter] ?? 0);
      slices.get(p.id).push(r);
    }
  }
  for (const p of paths) await p.dispose?.();
  const slicesRun = FINE * paths.length;
  console.log(
    `fine check: ${(waited / slicesRun).toFixed(0)} ms a slice waiting for the workerds to go quiet; ${neverQuiet} of ${slicesRun} slices started after ${QUIET.mostMs} ms without`,
  );
  const against = (id, ref, f) => median(slices.get(id).map((r, i) => f(r) / f(slices.get(ref)[i])));
  return {
    ids: [...ids],
    compared,
    // Requests per second of the slice, timed to its last answer (a duration's slices run to
    // autocannon's next 1 s sample; the cold crowd's run to a count of requests, however long).
    throughput: (id, ref) => against(id, ref, (r) => r.rate),
    cpu: (id, ref) => against(id, ref, (r) => r.cpuPerRequest),
    // Latency's tail: autocannon's p99 is in whole ms, so a 0 ms slice counts as 1.
    p99: (id, ref) => against(id, ref, (r) => Math.max(1, r.p99)),
    limiterPer1000: (id) => median(slices.get(id).map((r) => (1000 * r.limiterCalls) / r.requests)),
    statuses: (id) => sumStatuses(slices.get(id)),
  };
}

/** The paths whose limiter calls the fine check counts. */
const FINE_PATHS_COUNT_LIMITER = new Set(["crowd", "crowdcold"]);

/** Prints the fine check's table of every path, and with `--against` the table of current / older. */
export function printFine(config, fine) {
  const { fine: FINE, ref: REF, against: AGAINST, spread: SPREAD } = config;
  console.log(
    `\nfine check (${FINE} rounds of slices of about 1 s, each path in its own workerd; median ratio to the bare slices of the same round):`,
  );
  console.log("| path | throughput / bare POST | CPU per request × bare POST | throughput / bare GET | statuses |");
  console.log("|---|---:|---:|---:|---|");
  for (const id of [...fine.ids, ...fine.compared.map((id) => `${id}@ref`)])
    console.log(
      `| ${id === "bare" ? "bare GET" : id} | ${fine.throughput(id, "post").toFixed(2)} | ${fmt(fine.cpu(id, "post"))} | ${id === "bare" ? "1.00" : fine.throughput(id, "bare").toFixed(2)} | ${JSON.stringify(fine.statuses(id))} |`,
    );
  if (!fine.compared.length) return;
  /** The routes --against compares, as its table names them (the issue's columns). */
  const ROUTE_TITLES = {
    pub1: "publish, drop rate 0, delivered (1 subscriber)",
    pub10: `publish, drop rate 0, delivered (${RECIPE_SUBSCRIBERS} subscribers)`,
    drop50: `publish, drop rate 0.5 (${RECIPE_SUBSCRIBERS} subscribers)`,
    deny: "flood of denied publishes (429)",
    crowd: `publish, ${SPREAD} subjects cycled (warm: touched before each slice)`,
    crowdcold: `publish, ${SPREAD} new subjects × ${COLD_PUBLISHES} (cold: first contact measured)`,
    pusher10: "Pusher HTTP API event, 10 Pusher connections",
  };
  console.log(
    `\nagainst ${REF.short} (${AGAINST}), same rounds (each route's current and ${REF.short} slices are next to each other; below 1: slower than ${REF.short}):`,
  );
  console.log(
    `| route | current / bare GET | ${REF.short} / bare GET | current / ${REF.short} | CPU per request, current × ${REF.short} | limiter calls /1k, current | limiter calls /1k, ${REF.short} |`,
  );
  console.log("|---|---:|---:|---:|---:|---:|---:|");
  for (const id of fine.compared) {
    const limiter = (x) => (FINE_PATHS_COUNT_LIMITER.has(id) ? fine.limiterPer1000(x).toFixed(0) : "–");
    console.log(
      `| ${ROUTE_TITLES[id]} | ${fine.throughput(id, "bare").toFixed(2)} | ${fine.throughput(`${id}@ref`, "bare").toFixed(2)} | ${fine.throughput(id, `${id}@ref`).toFixed(2)} | ${fmt(fine.cpu(id, `${id}@ref`))} | ${limiter(id)} | ${limiter(`${id}@ref`)} |`,
    );
  }
}
