#!/usr/bin/env node
// `npm run bench:fanout`: one public channel, N WebSocket subscribers, a steady publisher — how
// delivery holds up as the audience grows (docs/benchmarks.md, "bench:fanout"; docs/scaling.md).
//
// For each size (--sizes, default 100,1000,3000,5000) a fresh Floodgate starts in workerd through
// Miniflare's API, straight to the Worker as for `npm run bench` (lib/workerd.mjs; no dev proxy), N
// subscribers connect, and one publisher sends --rate publishes/s (default 20) for --seconds (default
// 8), each carrying its send time. Per size it prints deliveries/s (messages received over the time
// from the first publish to the last frame), publish→receive p50/p99, lost frames (a delivered
// publish's seq a subscriber never got) and duplicated ones, the channel object's sends per publish,
// and workerd CPU per delivery (the workerd's own CPU time, as lib/workerd.mjs reads it, over messages
// received).
//
// Channel-object sends per publish: when `GET /v1/channels/{channel}/stats` has `relays` and
// `relay_sends_total` (the fan-out through relay objects), the channel's calls to its relays per
// publish, Δrelay_sends_total ÷ delivered publishes; without them it prints "1 (no relays)": the
// channel object itself is the one sender, writing every frame to every socket.
//
// --batch: the subscribers ask for packed frames (`?batch=1`, docs/api.md, "Packed frames"): each
// text frame is an array of messages. Deliveries count messages either way; the table adds the
// WebSocket sends (frames) per delivered message, 1 without --batch and less the more frames pack.
// With --vars '{"FRAME_DELAY":"20ms"}' the relays also hold frames back to pack more.
//
// --presence: presence at scale (docs/api.md, "Presence"). Each size runs twice, without and with
// `?presence=1` on every subscriber, and in both runs the publisher starts while the crowd is still
// joining (so publish→receive latency is measured while it joins; lost is not counted, since a
// subscriber that joins late was never owed the earlier messages). PRESENCE_INTERVAL is 2s unless
// --vars sets it. The table adds, per run: presence frames per subscriber per interval (the most any
// one subscriber got of `interval` frames, ÷ the intervals the run lasted: at most 1 above
// PRESENCE_ANNOUNCE_MAX), the most `join`/`leave` frames one subscriber got (at most
// PRESENCE_ANNOUNCE_MAX: only while the channel was that small), and the channel's calls to its
// relays for presence per interval: the stats' `presence.sends_total` (relay lines given presence
// frames, and relays woken for presence) ÷ intervals: ∝ relays, not subscribers.
//
// --pusher: the Pusher door (docs/api.md, "The Pusher door"). After each size's run, the same size
// again through the door, in the same run: N Pusher Channels connections (pusher-connection.mjs: the
// protocol as pusher-js speaks it) on one `pusher:` channel, the same publishes as Pusher events. Its
// row in the table says "Pusher"; below the table, its workerd CPU per delivery beside the native
// door's, and the channel's sends per publish, which equal its connection hosts, not its connections.
// --max-rate 5/s: each reader's rate (docs/api.md, "Each reader's rate"). Each size runs again right
// after its unthrottled run with every subscriber at `?max_rate=`, and a table sets the two side by
// side: messages each subscriber received (fewest–most), skipped, whether every subscriber's received +
// skipped (the `skipped` of its subscriber summaries) is every delivered publish exactly, and workerd
// CPU per published message per subscriber in both runs (whatever the relay did with it: sent or
// skipped), with their ratio. SUMMARY_INTERVAL is the shipped 1s, so the tail waits for the last
// summaries.
//
// --floor: the socket floor (lib/bench-socket-floor-worker.mjs). After each size's native run, the
// same size against a Worker that does only what no fan-out can skip: hibernatable WebSockets in
// objects of 1,000, each message built once and sent with one `ws.send` per socket, packed into as
// many frames per message as the native run sent (with --batch). Below the table: workerd CPU per
// delivery of both, and their ratio — how far Floodgate is from the cost of the sockets themselves.
//
// --vars '{"NAME":"value"}' sets Worker variables on top of the shipped [vars] and the budgets below
// (e.g. '{"RELAY_CAPACITY":"500"}' for more relays per size).
//
// Limits that would otherwise bind, and what the script does about them:
// - Subscribe budgets: the subscribers are anonymous, from one address, so each subscribe charges
//   that address's read budget (READ_RATE, 20/s shipped), and a token would charge SUBSCRIBE_RATE.
//   The bench Worker gets READ_RATE, SUBSCRIBE_RATE and PUBLISH_RATE set to "" (budget off) in its
//   own vars; the product defaults are unchanged. Being one client, they would also meet
//   MAX_SUBSCRIPTIONS_PER_CLIENT (20 shipped): the bench Worker sets it to the size.
// - File descriptors: each socket is one descriptor here and one in workerd. The script checks the
//   soft limit (`ulimit -n`) against the largest size before starting, and says how to raise it.
// - One Node thread cannot read 100,000 frames/s and still timestamp them on time, so subscribers
//   are spread over --clients worker threads (default: one per 1,000 subscribers, at most 4), each
//   opening its sockets 100 at a time. The machine's cores are shared with workerd all the same:
//   this process's CPU (subscriber threads and publisher) is printed beside workerd's, and the load
//   average at the end of each size (other work on the machine moves every figure).
//
// The parts, in scripts/bench-fanout/: run-size.mjs (one size: the Worker, the publisher, the tally),
// subscriber-threads.mjs and subscriber-thread.mjs (the subscribers' threads), floodgate-connection.mjs
// and pusher-connection.mjs (the kinds of connection they open: Floodgate's WebSocket, a Pusher
// connection), report.mjs (the tables).
import { readFileSync } from "node:fs";
import { availableParallelism } from "node:os";
import { loadAverage, maxRateRow, presenceRow, printReport } from "./bench-fanout/report.mjs";
import { runSize } from "./bench-fanout/run-size.mjs";
import { options } from "./lib/options.mjs";

const opts = options("bench:fanout", {
  sizes: "100,1000,3000,5000",
  seconds: 8,
  rate: 20,
  clients: 0,
  settle: 60,
  vars: "{}",
  batch: false,
  presence: false,
  pusher: false,
  floor: false,
  "max-rate": "",
});
let extraVars;
try {
  extraVars = JSON.parse(opts.vars);
  if (extraVars === null || typeof extraVars !== "object" || Array.isArray(extraVars)) throw new Error();
} catch {
  console.error(`floodgate bench:fanout: --vars must be a JSON object of Worker variables, not ${opts.vars}`);
  process.exit(2);
}
const SIZES = opts.sizes.split(",").map((x) => Number(x.trim()));
if (SIZES.some((n) => !Number.isInteger(n) || n < 1)) {
  console.error(`floodgate bench:fanout: --sizes must be whole numbers ≥ 1, not "${opts.sizes}"`);
  process.exit(2);
}
const PUBLISHES = Math.round(opts.seconds * opts.rate);
checkDescriptors(Math.max(...SIZES));

console.log(
  `floodgate bench:fanout — one public channel, ${opts.rate} publishes/s for ${opts.seconds} s per size${opts.batch ? ", packed frames (batch=1)" : ""}, Node ${process.version}, ${availableParallelism()} cores, load average ${loadAverage()}`,
);
const maxRate = opts["max-rate"] || null;
const rows = [];
const presenceRows = [];
const rateRows = [];
for (const size of SIZES) {
  const runs = opts.presence ? [false, true] : [false];
  // This size's native run without presence: what --max-rate compares with (not the Pusher run).
  let unthrottled = null;
  let withPresence = null;
  for (const presence of runs) {
    const row = await runSize(size, presence, { settings: opts, extraVars, publishes: PUBLISHES });
    rows.push(row);
    if (presence) withPresence = row;
    else unthrottled = row;
    console.log(
      `  ${size} subscribers${opts.presence ? (presence ? ", presence=1" : ", no presence") : ""}: ${row.deliveriesPerS.toFixed(0)} deliveries/s, p50 ${row.p50.toFixed(1)} ms, p99 ${row.p99.toFixed(1)} ms, lost ${row.lost}, duplicated ${row.duplicated} (load average ${loadAverage()})`,
    );
  }
  if (opts.pusher) {
    // The same size through the Pusher door, in the same run: its CPU per delivery beside the native one's.
    const row = await runSize(size, false, { settings: opts, extraVars, publishes: PUBLISHES }, "pusher");
    rows.push(row);
    console.log(
      `  ${size} Pusher connections: ${row.deliveriesPerS.toFixed(0)} deliveries/s, p50 ${row.p50.toFixed(1)} ms, p99 ${row.p99.toFixed(1)} ms, lost ${row.lost}, duplicated ${row.duplicated}, ${row.sendsPerPublish} channel sends per publish over ${row.relays} hosts (load average ${loadAverage()})`,
    );
  }
  if (opts.floor) {
    // The socket floor at the frames per message the native run sent (1 without --batch).
    const framesPerMessage = opts.batch ? unthrottled.framesPerMessage : 1;
    const row = await runSize(
      size,
      false,
      { settings: opts, extraVars, publishes: PUBLISHES, framesPerMessage },
      "floor",
    );
    rows.push(row);
    console.log(
      `  ${size} subscribers, socket floor: ${row.deliveriesPerS.toFixed(0)} deliveries/s, p50 ${row.p50.toFixed(1)} ms, lost ${row.lost}, duplicated ${row.duplicated}, ${row.framesPerMessage.toFixed(3)} frames per message (load average ${loadAverage()})`,
    );
  }
  if (opts.presence) presenceRows.push(presenceRow(unthrottled, withPresence));
  if (maxRate) {
    // The same size again, every subscriber at --max-rate, right after the unthrottled run.
    const row = await runSize(size, false, { settings: opts, extraVars, publishes: PUBLISHES, maxRate });
    console.log(
      `  ${size} subscribers, max_rate=${maxRate}: ${row.receivedPerSubscriber.join("–")} messages each, ${row.skipped} skipped, accounts off ${row.accountsOff} (load average ${loadAverage()})`,
    );
    rateRows.push(maxRateRow(unthrottled, row));
  }
}
printReport(rows, presenceRows, opts, rateRows);

/** Stops with advice when this process may not open a descriptor per subscriber. */
function checkDescriptors(largest) {
  const line = readFileSync("/proc/self/limits", "utf8")
    .split("\n")
    .find((l) => l.startsWith("Max open files"));
  const soft = Number(line?.split(/\s+/)[3]);
  const needed = largest + 500; // the sockets, plus workerd's pipes, files and Node's own
  if (Number.isFinite(soft) && soft < needed) {
    console.error(
      `floodgate bench:fanout: ${largest} subscribers need about ${needed} file descriptors in this process and in workerd, but the limit is ${soft}; raise it first (\`ulimit -n ${Math.max(needed, 20000)}\` in this shell, up to the hard limit \`ulimit -Hn\`)`,
    );
    process.exit(2);
  }
}
