// What `npm run bench` prints of its 2 s rounds: one table of every scenario as ratios to the bare
// routes of the same moment, the lines that compare scenarios with each other, and whether every
// drop of the run is accounted for in the record.
import { median, metrics, sumStatuses } from "../lib/bench.mjs";
import { BROADCAST_SHARDS, FLOOD_CONNECTIONS, RECIPE_SUBSCRIBERS } from "./workload.mjs";

/** A figure for the table, or "–" where this machine cannot give it (CPU time needs Linux's /proc). */
export const fmt = (x, digits = 2) => (Number.isFinite(x) ? x.toFixed(digits) : "–");

/**
 * Prints the rounds' table and lines: `scenarios` as run, their `runs` and the bare runs paired with
 * them (`pairedBare`, from rounds.mjs), `has(id)` whether a scenario ran, `fg` the Worker whose
 * record is checked.
 */
export async function printRounds({ scenarios, runs, pairedBare, has, fg }) {
  const med = (id, f) => median(runs.get(id).map(f));
  const bareRps = med("bare", (r) => r.rps);
  const ratio = (id) => median(runs.get(id).map((r, i) => r.rps / pairedBare.get(id)[i].rps));
  // A publish is a POST with a body, which costs the client and the runtime more than a GET: the ratio
  // to the bare POST divides that out (the paired ratio to GET over the bare POST's own).
  const ratioPost = (id) => (has("post") ? ratio(id) / ratio("post") : Number.NaN);
  // CPU per request as a multiple of the bare POST's, from the same pairing.
  const cpuRatio = (id) => median(runs.get(id).map((r, i) => r.cpuPerRequest / pairedBare.get(id)[i].cpuPerRequest));
  const cpuPost = (id) => (id === "bare" ? 1 / cpuRatio("post") : cpuRatio(id) / cpuRatio("post"));
  const per1000 = (id, key) => {
    const list = runs.get(id);
    const publishes = list.reduce((a, r) => a + r.requests, 0);
    const n = list.reduce((a, r) => a + (r.counts?.[key] ?? 0), 0);
    return publishes ? ((1000 * n) / publishes).toFixed(0) : "–";
  };
  console.log(
    "\n| scenario | req/s | p50 ms | p99 ms | deliveries/s | ratio to bare GET | ratio to bare POST | workerd CPU µs/req | CPU × bare POST | channel calls /1k | analytics calls /1k | limiter calls /1k | KV reads /1k | statuses |",
  );
  console.log("|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---|");
  for (const s of scenarios) {
    const isBare = s.id === "bare" || s.reference;
    console.log(
      `| ${s.title} | ${Math.round(med(s.id, (r) => r.rps))} | ${med(s.id, (r) => r.p50)} | ${med(s.id, (r) => r.p99)} | ${s.subs ? Math.round(med(s.id, (r) => r.deliveries)) : "–"} | ${s.id === "bare" ? "1.00" : ratio(s.id).toFixed(2)} | ${s.id === "post" ? "1.00" : (isBare && !s.postShaped) || !has("post") ? "–" : ratioPost(s.id).toFixed(2)} | ${fmt(
        med(s.id, (r) => r.cpuPerRequest),
        0,
      )} | ${has("post") ? fmt(cpuPost(s.id)) : "–"} | ${isBare ? "–" : per1000(s.id, "channel")} | ${isBare ? "–" : per1000(s.id, "analytics")} | ${isBare ? "–" : per1000(s.id, "limiter")} | ${isBare ? "–" : per1000(s.id, "kv")} | ${JSON.stringify(sumStatuses(runs.get(s.id)))} |`,
    );
  }
  console.log(`\nbare route: ${Math.round(bareRps)} req/s (median)`);
  if (has("post")) console.log(`bare POST with a publish's body: ${ratio("post").toFixed(2)} of the bare GET`);
  if (has("rpc2") && has("rpc2w") && has("pub1"))
    console.log(
      `floors: two no-op object calls run at ${ratio("rpc2").toFixed(2)} of bare, two writing calls at ${ratio("rpc2w").toFixed(2)}; a limited, delivered publish runs at ${median(runs.get("pub1").map((r, i) => r.rps / runs.get("rpc2w")[i].rps)).toFixed(2)} of the writing floor`,
    );
  /** Median over rounds of `a`'s throughput against `b`'s in the same round (the 2 s runs). */
  const roundRatio = (a, b) => median(runs.get(a).map((r, i) => r.rps / runs.get(b)[i].rps));
  if (has("pub1") && has("write1"))
    console.log(
      `one-write floor: ${ratio("write1").toFixed(2)} of bare; a delivered publish (1 subscriber) runs at ${roundRatio("pub1", "write1").toFixed(2)} of it`,
    );
  if (has("pub10") && has("recipe10"))
    console.log(
      `literal recipe (${RECIPE_SUBSCRIBERS} subscribers): ${ratio("recipe10").toFixed(2)} of bare; Floodgate's publish with ${RECIPE_SUBSCRIBERS} subscribers runs at ${roundRatio("pub10", "recipe10").toFixed(2)}× it`,
    );
  if (has("shard1") && has("pub1"))
    console.log(
      `audience shards: a sharded publish runs at ${roundRatio("shard1", "pub1").toFixed(2)} of an unsharded one (target ≥ 0.95: shard selection costs ≤ 5%), CPU ${median(runs.get("shard1").map((r, i) => r.cpuPerRequest / runs.get("pub1")[i].cpuPerRequest)).toFixed(2)}× per request`,
    );
  if (has("broadcast10")) {
    const cpu = med("broadcast10", (r) => r.cpuPerRequest);
    const rps = med("broadcast10", (r) => r.rps);
    console.log(
      `broadcast into ${BROADCAST_SHARDS} shards: ${Math.round(rps)} broadcasts/s = ${Math.round(rps * BROADCAST_SHARDS)} shard deliveries/s; ${fmt(cpu / BROADCAST_SHARDS, 0)} µs workerd CPU per shard (${fmt(cpu, 0)} per broadcast)`,
    );
  }
  console.log("(2 s runs; the targets are judged by the fine check below)");
  const dropped = has("drop90") ? runs.get("drop90").reduce((a, r) => a + r.counts.dropped, 0) : 0;
  const analyticsCalls = has("drop90") ? runs.get("drop90").reduce((a, r) => a + r.counts.analytics, 0) : 0;
  if (has("drop90"))
    console.log(
      `analytics batching at drop rate 0.9: ${dropped} drops, ${analyticsCalls} analytics-object calls → ${((1000 * analyticsCalls) / Math.max(1, dropped)).toFixed(0)} per 1,000 drops (target ≤ 100)`,
    );
  if (has("flood30k")) {
    const sum = (k) => runs.get("flood30k").reduce((a, r) => a + r.counts[k], 0);
    const [dropped, copies, failures, calls, unsettled, live] = [
      "dropped",
      "copies",
      "failures",
      "analytics",
      "unsettled",
      "live",
    ].map(sum);
    console.log(
      `drop flood (30 KB, drop rate 1, ${FLOOD_CONNECTIONS} connections): dropped ${dropped}, copies ${copies}, failures ${failures}, unaccounted ${dropped - copies - failures} (must be 0; unsettled sends ${unsettled}, handed to the live view ${live}); ${((1000 * calls) / Math.max(1, dropped)).toFixed(0)} analytics-object calls per 1,000 drops`,
    );
  }
  // Nothing accepted is lost under load: every drop of the run (all scenarios) is a copy in the record
  // or a counted failure.
  {
    const m = await metrics(fg);
    const allDropped = m['floodgate_messages_total{result="dropped"}'] ?? 0;
    const recorded = m.floodgate_record_copies_total ?? 0;
    const failures = m.floodgate_record_failures_total ?? 0;
    console.log(
      `record: ${recorded} copies recorded + ${failures} counted failures for ${allDropped} drops in the whole run${recorded + failures === allDropped ? " (all accounted for)" : " — MISMATCH"}`,
    );
  }
}
