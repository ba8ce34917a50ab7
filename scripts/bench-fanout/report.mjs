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
  return `| ${on.size.toLocaleString("en")} | ${on.maxRate} | ${(on.delivered / on.publishSeconds).toFixed(1)}/s | ${fewest}–${most} (${perS(fewest)}–${perS(most)}/s) | ${on.skipped.toLocaleString("en")} | ${on.accountsOff === 0 ? "all exact" : `${on.accountsOff} off`} | ${off.cpuPerOffer.toFixed(2)} µs | ${on.cpuPerOffer.toFixed(2)} µs | ${(on.cpuPerOffer / off.cpuPerOffer).toFixed(2)} |`;
}

/** Prints the rows of every run (run-size.mjs) and, with --presence, the lines of `presenceRows`. */
export function printReport(rows, presenceRows, { presence }, rateRows = []) {
  console.log(
    "\n| subscribers | deliveries/s | publish→receive p50 | p99 | last frame after the last publish was sent | lost | duplicated | channel-object sends per publish | relays | frames per delivered message | workerd CPU per delivery | Node CPU per delivery (subscribers, publisher) | publishes (delivered / sent) | subscribers closed early |",
  );
  console.log("|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|");
  for (const r of rows) {
    console.log(
      `| ${r.size.toLocaleString("en")}${r.door === "pusher" ? " Pusher" : ""} | ${Math.round(r.deliveriesPerS).toLocaleString("en")} | ${r.p50.toFixed(1)} ms | ${r.p99.toFixed(1)} ms | ${r.tailS.toFixed(1)} s | ${r.lost} | ${r.duplicated} | ${r.sendsPerPublish} | ${r.relays} | ${r.framesPerMessage.toFixed(3)} | ${Number.isFinite(r.cpuPerDelivery) ? `${r.cpuPerDelivery.toFixed(1)} µs` : "–"} | ${r.clientCpuPerDelivery.toFixed(1)} µs | ${r.delivered} / ${r.sent} | ${r.closed} |`,
    );
  }
  const pusherRows = rows.filter((r) => r.door === "pusher");
  for (const p of pusherRows) {
    const native = rows.find((r) => r.size === p.size && r.door !== "pusher");
    if (!native) continue;
    console.log(
      `\n${p.size.toLocaleString("en")} subscribers, workerd CPU per delivery: Pusher door ${p.cpuPerDelivery.toFixed(1)} µs, native ${native.cpuPerDelivery.toFixed(1)} µs (${(p.cpuPerDelivery / native.cpuPerDelivery).toFixed(2)}×); channel sends per publish ${p.sendsPerPublish} over ${p.relays} hosts (native: ${native.sendsPerPublish} over ${native.relays} relays).`,
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
