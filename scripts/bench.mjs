#!/usr/bin/env node
import { fineCheck, printFine } from "./bench/fine-check.mjs";
import { runRounds } from "./bench/rounds.mjs";
import { startScenarios } from "./bench/scenarios.mjs";
import { printRounds } from "./bench/table.mjs";
import { printTargets, targets } from "./bench/targets.mjs";
// `npm run bench`: Floodgate under load, end to end, in one run on this machine.
//
// Starts the Worker in workerd through Miniflare's API (straight to the Worker, see lib/workerd.mjs),
// opens real subscribers, drives publishes with autocannon, and prints one table: a bare Hono route
// (the ceiling) and a bare POST, publish at throttle 0 with the limiter on and 1 or 100 WebSocket
// subscribers or 100 SSE ones, many subjects (--spread N, default 500) publishing to one channel
// (crowd) or each to its own (spread), publish at drop rate 0.5 and 0.9 (and at 0.5 on a channel with a
// THROTTLE_SUMMARY rule, drop50sum: what counting drops per key costs), a drop flood of 30 KB
// messages at drop rate 1 from 100 connections (flood30k: every drop must be a copy on the analytics
// channel or a counted copy failure), and the deny path of a flooding subject and of a read flood
// (anonymous history reads from one IP, readdeny) — requests/s, p50/p99, deliveries/s, workerd CPU per request, every figure as a
// ratio to the bare routes, and Durable Object calls and KV reads per 1,000 publishes (from the
// Worker's own /metrics counters). Beside them run the floors of the same shape (lib/bench.mjs: the
// bare POST, the one-write floor — a publish's request and one object call that stores it as one
// row —, two no-op or writing object calls) and the literal before-publish recipe with 10 WebSocket
// subscribers (lib/bench-recipe-worker.mjs), against Floodgate's publish with 10 (pub10), and in the
// fine check the recipe at drop rate 0.5 (recipe50) against Floodgate's at 0.5 (drop50).
// The Pusher door (docs/api.md, "The Pusher door"): a signed `POST /apps/{id}/events` to 10 Pusher
// connections (pusher10) against the native publish with 10 subscribers (pub10), on the same Worker.
// Audience shards (docs/api.md, "Shards"): a publish into a sharded channel against pub1 (shard1; the
// shard selection should cost at most 5%), and a broadcast into 10 shards (broadcast10: cost per shard).
//
// Scenarios are interleaved in rounds, each run paired with a bare-route run made next to it, and
// the median of the paired ratios is reported: the machine's throughput drifts by ±30% within
// seconds, so only a ratio to a bare run of the same moment means anything. The deny path runs right
// after the references, before any scenario that leaves background work (analytics copies) behind.
// The targets (docs/benchmarks.md) are judged by the fine check at the end (bench/fine-check.mjs),
// which prints them with today's value and whether each is met (bench/targets.mjs).
// Options: --seconds N (default 2), --rounds N (default 5), --connections N (default 20; the drop
// flood always uses 100),
// --subscribers N (default 100), --spread N (default 500), --only id,id (just those scenarios; the
// fine check adds the references their targets need), --fine N (rounds of the fine check at the end,
// default 12; 0 skips it), --against <ref> (the fine check also runs each Floodgate path on that older
// commit, in the same rounds, and prints current / ref per route: a regression shows as a ratio below
// 1; see lib/bench-ref.mjs), --rounds 0 (skip the 2 s rounds and their table: the fine check only).
//
// The fine check also measures the crowd cold (crowdcold): fresh subjects every slice, each publishing
// COLD_PUBLISHES times, so every subject's first contact with the limiter is in the measurement —
// next to the warm crowd, whose subjects are touched before each slice.
//
// The parts, in scripts/bench/: workload.mjs (the bench Worker's variables, the request shapes, the
// crowds of subjects), scenarios.mjs (what each scenario runs), rounds.mjs (the paired 2 s rounds),
// table.mjs (their table), fine-check.mjs (the fine check and its tables), targets.mjs (the targets).
import { refTree } from "./lib/bench-ref.mjs";
import { options } from "./lib/options.mjs";

const opts = options("bench", {
  seconds: 2,
  rounds: 5,
  connections: 20,
  subscribers: 100,
  spread: 500,
  only: "",
  fine: 12,
  against: "",
});
const config = {
  ...opts,
  // --only id,id: run just those scenarios (ids as in the round lines), e.g. --only deny,drop90.
  wanted: (id) => !opts.only || opts.only.split(",").includes(id),
  // --against <ref>: the older commit every Floodgate path of the fine check is also run on.
  ref: opts.against ? refTree(opts.against) : null,
};

const { fg, bare, scenarios, barePost, bareWrite1, close } = await startScenarios(config);
const has = (id) => scenarios.some((s) => s.id === id);
const { runs, pairedBare } = await runRounds(config, scenarios, fg);
if (config.rounds > 0) await printRounds({ scenarios, runs, pairedBare, has, fg });
await close();

const judged = targets(config, has);
const fine = await fineCheck(config, {
  targets: judged,
  has,
  references: { bareScenario: scenarios[0], barePost, bareWrite1 },
});
await bare.stop();
if (fine) {
  printFine(config, fine);
  printTargets(judged, fine);
}
