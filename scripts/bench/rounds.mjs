// How `npm run bench` measures: one load run with the workerd CPU it cost, and the 2 s rounds in
// which every scenario is paired with a bare-route run made next to it. The Worker's /metrics
// counters read around each run are named here too (the fine check reads the limiter's).
import { load, metrics } from "../lib/bench.mjs";
import { cpuMicros } from "../lib/workerd.mjs";

/** The /metrics series counted around each Floodgate run, by the name the table gives them. */
export const COUNTERS = {
  channel: 'floodgate_object_calls_total{object="channel"}',
  analytics: 'floodgate_object_calls_total{object="analytics"}',
  limiter: 'floodgate_object_calls_total{object="limiter"}',
  kv: "floodgate_kv_reads_total",
  delivered: 'floodgate_messages_total{result="delivered"}',
  dropped: 'floodgate_messages_total{result="dropped"}',
  // The record of dropped messages: copies written to RECORD_BUCKET, and copies it failed to take.
  copies: "floodgate_record_copies_total",
  failures: "floodgate_record_failures_total",
  // Copies in a send that never settled (each may still have reached the queue), and copies the
  // consumer handed on to the analytics channel (the live view): where to look when a drop is unaccounted.
  unsettled: "floodgate_analytics_copies_unsettled_total",
  live: "floodgate_analytics_copies_total",
};

/**
 * One load run, with the workerd CPU it cost per request (µs, counted until `settleMs` after the run so
 * background work is included). CPU per request does not depend on how the load generator, which
 * shares this machine, is doing, so it is the steadier of the two measures.
 */
export async function measured(s, settleMs, options) {
  const cpu0 = cpuMicros(s.pid);
  const r = await load(s.url, s.opts, options);
  if (settleMs) await new Promise((res) => setTimeout(res, settleMs));
  r.requests = Object.values(r.statuses).reduce((a, n) => a + n, 0);
  r.cpuPerRequest = (cpuMicros(s.pid) - cpu0) / r.requests;
  return r;
}

/**
 * `config.rounds` rounds of every scenario (the bare GET, `scenarios[0]`, is each one's pair):
 * returns { runs, pairedBare }, each scenario's runs and the bare runs paired with them, by id.
 */
export async function runRounds(config, scenarios, fg) {
  const { seconds: SECONDS, rounds: ROUNDS, connections: CONNECTIONS, subscribers: SUBSCRIBERS } = config;
  const run = { seconds: SECONDS, connections: CONNECTIONS };
  console.log(
    `floodgate bench — ${scenarios.length} scenarios × ${ROUNDS} rounds × ${SECONDS}s, ${CONNECTIONS} connections, ${SUBSCRIBERS} subscribers, Node ${process.version}`,
  );
  const runs = new Map(scenarios.map((s) => [s.id, []]));
  const bareScenario = scenarios[0];
  const pairedBare = new Map(scenarios.map((s) => [s.id, []]));
  for (let round = 1; round <= ROUNDS; round++) {
    const line = [];
    for (const s of scenarios) {
      if (s.id === "bare") continue;
      // Each scenario is paired with a bare run made next to it (before it in odd rounds, after it in
      // even ones, so neither side always gets the quieter moment): this machine's throughput drifts
      // by ±30% within seconds, so a ratio to a bare run from another moment measures the drift.
      const bareFirst = round % 2 === 1;
      const runBare = () => measured(bareScenario, 0, run);
      const b0 = bareFirst ? await runBare() : null;
      await s.warm?.();
      const before = s.reference ? null : await metrics(s.worker ?? fg);
      const framesBefore = s.subs?.counter.frames ?? 0;
      // Background work of the last requests (analytics copies, metric flushes) lands within ~1 s,
      // counts in the scenario's CPU, and must not spill into a bare run.
      const r = await measured(s, s.reference ? 0 : 1200, { ...run, connections: s.connections ?? CONNECTIONS });
      if (s.settleCopies) await copiesSettled(s.worker ?? fg, before);
      if (before) {
        const after = await metrics(s.worker ?? fg);
        r.counts = Object.fromEntries(
          Object.entries(COUNTERS).map(([k, series]) => [k, (after[series] ?? 0) - (before[series] ?? 0)]),
        );
      }
      const b = b0 ?? (await runBare());
      runs.get("bare").push(b);
      pairedBare.get(s.id).push(b);
      r.deliveries = ((s.subs?.counter.frames ?? 0) - framesBefore) / SECONDS;
      runs.get(s.id).push(r);
      line.push(`${s.id} ${Math.round(r.rps)}/${Math.round(b.rps)}`);
    }
    console.log(`  round ${round}/${ROUNDS} (scenario/bare req/s): ${line.join(", ")}`);
  }
  return { runs, pairedBare };
}

/**
 * Waits (up to 60 s) until every drop since `before` is a copy or a counted copy failure, or their
 * sum stops moving for 10 s (the drops queue delivers in batches): a flood of large copies takes longer to land than the usual settle time.
 */
async function copiesSettled(worker, before) {
  let last = Number.NaN;
  let stableSince = Date.now();
  for (const start = Date.now(); Date.now() - start < 60_000; ) {
    const m = await metrics(worker);
    const d = (k) => (m[COUNTERS[k]] ?? 0) - (before[COUNTERS[k]] ?? 0);
    const landed = d("copies") + d("failures");
    if (landed === d("dropped")) return;
    if (landed !== last) {
      last = landed;
      stableSince = Date.now();
    } else if (Date.now() - stableSince > 10_000) return;
    await new Promise((res) => setTimeout(res, 250));
  }
}
