// What `npm run bench:fanout` prints once every size has run: the table of sizes, with --presence the
// presence table, and what the columns mean. Also the load average, printed beside every figure
// because other work on the machine moves them all.
import { loadavg } from "node:os";

/** The 1, 5 and 15 minute load averages. */
export function loadAverage() {
  return loadavg()
    .map((x) => x.toFixed(2))
    .join(" ");
}

/** The presence table's line for one size: its run without presence (`off`), then with (`on`). */
export function presenceRow(off, on) {
  const intervals = Math.max(1, on.runMs / on.intervalMs);
  const calls = on.presenceSends / intervals;
  return `| ${on.size.toLocaleString("en")} | ${on.relays} | ${intervals.toFixed(1)} | ${(on.presence.intervalMost / intervals).toFixed(2)} | ${on.presence.announceMost} | ${on.presence.states} | ${calls.toFixed(1)} | ${off.p50.toFixed(1)} → ${on.p50.toFixed(1)} ms | ${off.p99.toFixed(1)} → ${on.p99.toFixed(1)} ms |`;
}

/** The --max-rate table's line for one size: its unthrottled run (`off`), then at max_rate (`on`). */
export function maxRateRow(off, on) {
  const perS = (n) => (n / on.publishSeconds).toFixed(1);
  const [fewest, most] = on.receivedPerSubscriber;
  return `| ${on.size.toLocaleString("en")} | ${on.maxRate} | ${(on.delivered / on.publishSeconds).toFixed(1)}/s | ${fewest}–${most} (${perS(fewest)}–${perS(most)}/s) | ${on.skipped.toLocaleString("en")} | ${on.accountsOff === 0 ? "all exact" : `${on.accountsOff} off`} | ${off.cpuPerOffer.toFixed(2)} µs | ${on.cpuPerOffer.toFixed(2)} µs | ${judged(on.cpuPerOffer / off.cpuPerOffer, "", { max: MAX_RATE_CPU_MAX })} |`;
}

// The targets bench:fanout judges (docs/benchmarks.md, "Targets"): the Pusher door's CPU per delivery
// against the native door's in the same run; packed frames at 5,000 subscribers (20 publishes/s on a
// quiet machine); a subscriber at max_rate costing its relay no more than an unthrottled one.
const PUSHER_CPU_MAX = 1.3;
const PACKED_SIZE = 5000;
const PACKED_CPU_MAX_US = 4;
const PACKED_P50_MAX_MS = 300;
const PACKED_P99_MAX_MS = 1000;
const MAX_RATE_CPU_MAX = 1;

/** A count the row may carry as text ("0", "3 (frames still arriving…)", "– (joining)"): NaN when none. */
function countOf(value) {
  return typeof value === "number" ? value : Number.parseInt(String(value), 10);
}

/** `value` with its unit, the target's bound and whether it is met. */
function judged(value, unit, { max, digits = 2 }) {
  return `${value.toFixed(digits)}${unit}, target ≤ ${max}${unit}: ${value <= max ? "met" : "not met"}`;
}

/** Prints the rows of every run (run-size.mjs) and, with --presence, the lines of `presenceRows`. */
export function printReport(rows, presenceRows, { presence }, rateRows = []) {
  console.log(
    "\n| subscribers | deliveries/s | publish→receive p50 | p99 | last frame after the last publish was sent | lost | duplicated | channel-object sends per publish | relays | frames per delivered message | workerd CPU per delivery | Node CPU per delivery (subscribers, publisher) | publishes (delivered / sent) | subscribers closed early |",
  );
  console.log("|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|");
  for (const r of rows) {
    console.log(
      `| ${r.size.toLocaleString("en")}${r.door === "pusher" ? " Pusher" : r.door === "floor" ? " socket floor" : ""} | ${Math.round(r.deliveriesPerS).toLocaleString("en")} | ${r.p50.toFixed(1)} ms | ${r.p99.toFixed(1)} ms | ${r.tailS.toFixed(1)} s | ${r.lost} | ${r.duplicated} | ${r.sendsPerPublish} | ${r.relays} | ${r.framesPerMessage.toFixed(3)} | ${Number.isFinite(r.cpuPerDelivery) ? `${r.cpuPerDelivery.toFixed(1)} µs` : "–"} | ${r.clientCpuPerDelivery.toFixed(1)} µs | ${r.delivered} / ${r.sent} | ${r.closed} |`,
    );
  }
  const pusherRows = rows.filter((r) => r.door === "pusher");
  for (const p of pusherRows) {
    const native = rows.find((r) => r.size === p.size && r.door !== "pusher");
    if (!native) continue;
    console.log(
      `\n${p.size.toLocaleString("en")} subscribers, workerd CPU per delivery: Pusher door ${p.cpuPerDelivery.toFixed(1)} µs, native ${native.cpuPerDelivery.toFixed(1)} µs (${judged(p.cpuPerDelivery / native.cpuPerDelivery, "×", { max: PUSHER_CPU_MAX })}); channel sends per publish ${p.sendsPerPublish} over ${p.relays} hosts (native: ${native.sendsPerPublish} over ${native.relays} relays).`,
    );
  }
  for (const f of rows.filter((r) => r.door === "floor")) {
    const native = rows.find((r) => r.size === f.size && r.door === "native");
    if (!native) continue;
    console.log(
      `\n${f.size.toLocaleString("en")} subscribers against the socket floor (${f.framesPerMessage.toFixed(3)} frames per message, native ${native.framesPerMessage.toFixed(3)}): workerd CPU per delivery ${native.cpuPerDelivery.toFixed(1)} µs against ${f.cpuPerDelivery.toFixed(1)} µs (${(native.cpuPerDelivery / f.cpuPerDelivery).toFixed(2)}×); p50 ${native.p50.toFixed(0)} against ${f.p50.toFixed(0)} ms.`,
    );
  }
  for (const r of rows) {
    if (r.door !== "native" || r.size < PACKED_SIZE || r.framesPerMessage >= 1) continue;
    console.log(
      `\npacked frames, ${r.size.toLocaleString("en")} subscribers (targets of docs/benchmarks.md): workerd CPU per delivery ${judged(r.cpuPerDelivery, " µs", { max: PACKED_CPU_MAX_US })}, p50 ${judged(r.p50, " ms", { max: PACKED_P50_MAX_MS, digits: 0 })}, p99 ${judged(r.p99, " ms", { max: PACKED_P99_MAX_MS, digits: 0 })}, lost ${judged(countOf(r.lost), "", { max: 0, digits: 0 })}, duplicated ${judged(r.duplicated, "", { max: 0, digits: 0 })}`,
    );
  }
  if (presence) {
    console.log(
      "\n| subscribers | relays | intervals | interval frames per subscriber per interval (most) | join/leave frames of one subscriber (most) | state frames | presence calls per interval | p50 without → with presence | p99 without → with |",
    );
    console.log("|---:|---:|---:|---:|---:|---:|---:|---:|---:|");
    for (const r of presenceRows) console.log(r);
  }
  if (rateRows.length > 0) {
    console.log(
      "\n| subscribers | max_rate | published | received per subscriber | skipped (all subscribers) | received + skipped = published, per subscriber | workerd CPU per published message per subscriber, unthrottled | at max_rate | ratio |",
    );
    console.log("|---:|---:|---:|---:|---:|---:|---:|---:|---:|");
    for (const r of rateRows) console.log(r);
  }
  console.log(
    "\ndeliveries/s: messages received ÷ time from the first publish to the last frame. lost: a delivered publish's seq that a subscriber never received; duplicated: a seq received twice. frames per delivered message: WebSocket text frames received ÷ messages received (1 without --batch). CPU per delivery: that process's CPU time over the publishing and the tail, ÷ messages received.",
  );
}
