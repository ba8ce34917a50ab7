#!/usr/bin/env node
// `npm run bench:loop`: the sampler's control law against the naive ratio law, on the same seeded
// simulation the tests use (test/support/loop-simulation.ts): synthetic traces, one period of actuation
// lag, random drops or deterministic thinning. Prints one table per trace, then the production-timing
// table: today's Cron-only loop against the two-tier loop (Cron sweep + the channel's fast loop).
// Then the law with priority traffic (30% of the load, and more than the target) against the target.
// Options: --target N (msg/s, default 20), --period N (seconds, default 60), --lag N (periods, default 1),
// --seed N (default 1).
import { importSource } from "./lib/import-source.mjs";
import { options } from "./lib/options.mjs";

const {
  target: TARGET,
  period: PERIOD,
  lag: LAG,
  seed: SEED,
} = options("bench:loop", {
  target: 20,
  period: 60,
  lag: 1,
  seed: 1,
});

// The pack's own modules, bundled on the fly so the benchmark runs exactly the shipped law.
const m = await importSource(`export * from "./test/support/loop-simulation"; export * from "./functions/sampler";
export { seededRandom } from "./test/support/seeded-random";`);

const laws = [
  ["feed-forward, random drop", m.nextDropRate, "random"],
  ["feed-forward, thinning", m.nextDropRate, "thinning"],
  ["naive ratio, random drop", m.naiveRatioRate, "random"],
];
const target = { kind: "messages", perSecond: TARGET };
const pct = (x) => `${(100 * x).toFixed(1)}%`;
console.log(
  `floodgate bench:loop — target ${TARGET} msg/s, ${PERIOD} s periods, ${LAG} period(s) of actuation lag, seed ${SEED}`,
);
console.log("Each trace is 60 periods with its change at period 20 (ramp: rising from 0.5× to 6× target over");
console.log("periods 0–40). Steady-state error and dispersion: the last 20 periods. Settling: periods after the");
console.log("change until every later period stays within ±10% of min(offered, target) (— = never). Peak: the most");
console.log("delivered above target before settling (what the actuation lag lets through). Max error: the");
console.log("largest miss once settled.\n");
for (const [name, { trace, stepAt }] of Object.entries(m.traces(TARGET))) {
  console.log(`### ${name}\n`);
  console.log(
    "| law | steady-state error | settling (periods) | peak before settled | max error once settled | dispersion | KV writes/hour | starved periods |",
  );
  console.log("|---|---:|---:|---:|---:|---:|---:|---:|");
  for (const [label, law, mode] of laws) {
    const results = m.simulate({
      trace,
      target,
      law,
      periodS: PERIOD,
      lagPeriods: LAG,
      mode,
      random: m.seededRandom(SEED),
    });
    const s = m.summarise(results, TARGET * PERIOD, { stepAt, window: 20, periodS: PERIOD });
    console.log(
      `| ${label} | ${pct(s.steadyStateError)} | ${s.settlingPeriods ?? "—"} | ${pct(s.peakBeforeSettled)} | ${s.maxErrorAfterSettled === null ? "—" : pct(s.maxErrorAfterSettled)} | ${pct(s.dispersion)} | ${s.kvWritesPerHour.toFixed(1)} | ${s.starvedPeriods} |`,
    );
  }
  console.log("");
}

// Production timing (test/support/loop-simulation.ts, simulateTiming): the Cron sweep every 60 s, KV
// propagation 60 s, and in the two-tier loop the channel object's fast loop every 5 s, whose rate
// reaches the isolates with their next answers (1 s here). Fluid model: timing only, no random draw.
// Each row is over 12 phases of the surge against the periods: median, and worst in brackets.
{
  const P = m.PRODUCTION_TIMING;
  const PHASES = 12;
  const loops = [
    ["today: Cron 60 s + KV lag 60 s", null],
    [`two-tier: + fast loop ${P.fastPeriodS} s`, P.fastPeriodS],
  ];
  const median = (xs) => {
    const s = [...xs].sort((a, b) => a - b);
    return s[Math.floor((s.length - 1) / 2)];
  };
  const worst = (xs) => (xs.some((x) => x === null) ? null : Math.max(...xs));
  const secs = (x) => (x === null ? "never" : `${x.toFixed(1)} s`);
  const cell = (xs, f) => {
    const med =
      xs.some((x) => x === null) && xs.filter((x) => x === null).length * 2 >= xs.length
        ? null
        : median(xs.filter((x) => x !== null));
    return `${f(med)} (${f(worst(xs))})`;
  };
  console.log(`### Production timing — target ${TARGET} msg/s, load ${TARGET / 2} msg/s before the surge\n`);
  console.log(
    `Cron ${P.cronPeriodS} s, KV lag ${P.kvLagS} s (+${P.cacheS} s isolate cache), fast period ${P.fastPeriodS} s, answer delay ${P.pushDelayS} s.`,
  );
  console.log("Median over 12 phases of the surge against the periods, worst in brackets. Above target: messages");
  console.log("delivered over the target from the surge's start on; over-dropped: messages dropped that the target");
  console.log("allowed (a late rate still in force after the surge); hold / release: seconds until delivered stays");
  console.log("within ±10% of min(offered, target).\n");
  console.log("| scenario | loop | above target | time to hold | over-dropped | release after the surge |");
  console.log("|---|---|---:|---:|---:|---:|");
  for (const [name, sc] of Object.entries(m.timingScenarios(TARGET))) {
    for (const [label, fastPeriodS] of loops) {
      const runs = Array.from({ length: PHASES }, (_, k) =>
        m.summariseTiming(
          m.simulateTiming({ ...P, load: sc.load, target, fastPeriodS, phase: k / PHASES }),
          TARGET,
          sc,
        ),
      );
      const n = (x) => (x === null ? "—" : String(Math.round(x)));
      console.log(
        `| ${name} | ${label} | ${cell(
          runs.map((r) => r.excess),
          n,
        )} | ${cell(
          runs.map((r) => r.holdS),
          secs,
        )} | ${cell(
          runs.map((r) => r.overDropped),
          n,
        )} | ${
          sc.endS === null
            ? "—"
            : cell(
                runs.map((r) => r.releaseS),
                secs,
              )
        } |`,
      );
    }
  }
  console.log("");
}

// Priority messages (docs/throttling.md, "Priority messages"): never dropped, counted as delivered.
// The law drops more of the rest so the channel still holds its target; once priority alone exceeds
// the target, everything else is dropped. Same simulation, constant load, the last 20 of 60 periods.
priorityTable();

function priorityTable() {
  console.log(`### Priority traffic — target ${TARGET} msg/s, constant load, last 20 of 60 periods\n`);
  console.log(
    "| load | priority share | priority msg/s | delivered msg/s | vs target | rest delivered | drop rate of the rest |",
  );
  console.log("|---|---:|---:|---:|---:|---:|---:|");
  for (const [load, share] of [
    [2, 0.3],
    [3, 0.3],
    [4, 0.3], // priority alone 1.2× the target
    [2, 0.6],
  ]) {
    for (const mode of ["random", "thinning"]) {
      const results = m.simulate({
        trace: Array.from({ length: 60 }, () => load * TARGET),
        target,
        law: m.nextDropRate,
        periodS: PERIOD,
        lagPeriods: LAG,
        mode,
        random: m.seededRandom(SEED),
        priorityShare: share,
      });
      const tail = results.slice(-20);
      const perS = (f) => tail.reduce((a, r) => a + f(r), 0) / (tail.length * PERIOD);
      const delivered = perS((r) => r.delivered);
      const priority = perS((r) => r.priority);
      console.log(
        `| ${load}× (${mode}) | ${pct(share)} | ${priority.toFixed(1)} | ${delivered.toFixed(2)} | ${pct(delivered / TARGET - 1)} | ${(delivered - priority).toFixed(2)} | ${tail.at(-1).appliedRate} |`,
      );
    }
  }
  console.log("");
}
