// What `npm run bench` judges: the targets of docs/benchmarks.md ("Targets"), each checked against
// the fine check's figures (fine-check.mjs) and printed with today's value and whether it is met.
import { COLD_PUBLISHES } from "../lib/bench.mjs";
import { fmt } from "./table.mjs";
import { RECIPE_SUBSCRIBERS } from "./workload.mjs";

/**
 * The targets: a path, what it is measured against, and the least throughput ratio it must reach —
 * or, for `limiterCalls`, the most limiter-object calls per 1,000 publishes; for `p99`, the most its
 * p99 latency may be against the reference's p99 of the same round. A target is checked when
 * its path is among the scenarios run (`has`); its reference is added to the fine check if `--only`
 * left it out.
 */
export function targets(config, has) {
  const { spread: SPREAD } = config;
  return [
    { id: "crowd", against: "pub1", title: `crowd (${SPREAD} subjects) / single-subject delivered publish`, min: 0.8 },
    { id: "crowd", limiterCalls: true, title: "crowd limiter calls per 1,000 publishes", max: 100 },
    {
      id: "crowdcold",
      against: "pub1",
      title: `cold crowd (${SPREAD} new subjects × ${COLD_PUBLISHES}) / single-subject delivered publish`,
      min: 0.9,
    },
    { id: "crowdcold", limiterCalls: true, title: "cold crowd limiter calls per 1,000 publishes", max: 100 },
    { id: "pub1", against: "write1", title: "delivered publish, 1 subscriber / one-write floor", min: 0.8 },
    { id: "deny", against: "post", title: "deny path / bare POST", min: 0.75 },
    { id: "deny", against: "recipedeny", title: "flood of denials / the GCRA peer's (one object call each)", min: 2 },
    {
      id: "pub10",
      against: "recipe10",
      title: `delivered publish, ${RECIPE_SUBSCRIBERS} subscribers / literal recipe`,
      min: 2.5,
    },
    {
      id: "pusher10",
      against: "pub10",
      title: `Pusher HTTP API event, ${RECIPE_SUBSCRIBERS} Pusher connections / native delivered publish, ${RECIPE_SUBSCRIBERS} subscribers`,
      min: 0.8,
    },
    {
      id: "drop50",
      against: "recipe50",
      title: `publish at drop rate 0.5, ${RECIPE_SUBSCRIBERS} subscribers / literal recipe at 0.5`,
      min: 2.5,
    },
    {
      id: "drop50",
      against: "pub10",
      p99: true,
      title: `publish at drop rate 0.5: p99 latency / the delivered publish's (${RECIPE_SUBSCRIBERS} subscribers each)`,
      max: 2,
    },
    {
      id: "drop50sum",
      against: "drop50",
      title: "publish at drop rate 0.5 with a summary rule / without (≤ 5% cost)",
      min: 0.95,
    },
  ].filter((t) => has(t.id) || (t.id === "crowdcold" && coldWanted(config, has)));
}

/** The cold crowd runs in the fine check beside the warm one, or when named (`--only crowdcold`). */
function coldWanted({ only, ref, wanted }, has) {
  return has("crowd") || only.split(",").includes("crowdcold") || (ref !== null && wanted("crowdcold"));
}

/** Prints each target with today's value from the fine check (`fine`) and whether it is met. */
export function printTargets(list, fine) {
  console.log(
    "\ntargets (fine check: median over rounds of the path's slice against its reference's slice of the same round):",
  );
  console.log("| target | today | CPU per request × reference | target | |");
  console.log("|---|---:|---:|---:|---|");
  for (const t of list) {
    const today = t.limiterCalls
      ? fine.limiterPer1000(t.id)
      : t.p99
        ? fine.p99(t.id, t.against)
        : fine.throughput(t.id, t.against);
    const atMost = t.limiterCalls || t.p99;
    const met = atMost ? today <= t.max : today >= t.min;
    // Two decimals, or three where two would round a miss up to the target ("0.80 … not met").
    const shown = t.limiterCalls
      ? today.toFixed(0)
      : today.toFixed(!met && Number(today.toFixed(2)) === (t.min ?? t.max) ? 3 : 2);
    console.log(
      `| ${t.title} | ${shown} | ${t.limiterCalls || t.p99 ? "–" : fmt(fine.cpu(t.id, t.against))} | ${atMost ? `≤ ${t.max}` : `≥ ${t.min}`} | ${met ? "met" : "not met"} |`,
    );
  }
}
