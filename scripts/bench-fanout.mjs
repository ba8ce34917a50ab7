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
import { readFileSync } from "node:fs";
import { availableParallelism, loadavg } from "node:os";
import { isMainThread, parentPort, Worker, workerData } from "node:worker_threads";

/** Wall-clock milliseconds with sub-ms resolution, comparable between threads of one process. */
const now = () => performance.timeOrigin + performance.now();

if (isMainThread) await main();
else await subscriberThread(workerData);

async function main() {
  // Imported here, not at the top: the subscriber threads run this file too and need none of them.
  const { cpuMicros, startFloodgate } = await import("./lib/workerd.mjs");
  const { mintToken } = await import("./lib/tokens.mjs");
  const { options } = await import("./lib/options.mjs");
  const opts = options("bench:fanout", {
    sizes: "100,1000,3000,5000",
    seconds: 8,
    rate: 20,
    clients: 0,
    settle: 60,
    vars: "{}",
    batch: false,
    presence: false,
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
  const rows = [];
  const presenceRows = [];
  for (const size of SIZES) {
    const runs = opts.presence ? [false, true] : [false];
    for (const presence of runs) {
      const row = await runSize(size, presence);
      rows.push(row);
      console.log(
        `  ${size} subscribers${opts.presence ? (presence ? ", presence=1" : ", no presence") : ""}: ${row.deliveriesPerS.toFixed(0)} deliveries/s, p50 ${row.p50.toFixed(1)} ms, p99 ${row.p99.toFixed(1)} ms, lost ${row.lost}, duplicated ${row.duplicated} (load average ${loadAverage()})`,
      );
    }
    if (opts.presence) presenceRows.push(presenceRow(rows.at(-2), rows.at(-1)));
  }

  console.log(
    "\n| subscribers | deliveries/s | publish→receive p50 | p99 | last frame after the last publish was sent | lost | duplicated | channel-object sends per publish | relays | frames per delivered message | workerd CPU per delivery | Node CPU per delivery (subscribers, publisher) | publishes (delivered / sent) | subscribers closed early |",
  );
  console.log("|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|");
  for (const r of rows) {
    console.log(
      `| ${r.size.toLocaleString("en")} | ${Math.round(r.deliveriesPerS).toLocaleString("en")} | ${r.p50.toFixed(1)} ms | ${r.p99.toFixed(1)} ms | ${r.tailS.toFixed(1)} s | ${r.lost} | ${r.duplicated} | ${r.sendsPerPublish} | ${r.relays} | ${r.framesPerMessage.toFixed(3)} | ${Number.isFinite(r.cpuPerDelivery) ? `${r.cpuPerDelivery.toFixed(1)} µs` : "–"} | ${r.clientCpuPerDelivery.toFixed(1)} µs | ${r.delivered} / ${r.sent} | ${r.closed} |`,
    );
  }
  if (opts.presence) {
    console.log(
      "\n| subscribers | relays | intervals | interval frames per subscriber per interval (most) | join/leave frames of one subscriber (most) | state frames | presence calls per interval | p50 without → with presence | p99 without → with |",
    );
    console.log("|---:|---:|---:|---:|---:|---:|---:|---:|---:|");
    for (const r of presenceRows) console.log(r);
  }
  console.log(
    "\ndeliveries/s: messages received ÷ time from the first publish to the last frame. lost: a delivered publish's seq that a subscriber never received; duplicated: a seq received twice. frames per delivered message: WebSocket text frames received ÷ messages received (1 without --batch). CPU per delivery: that process's CPU time over the publishing and the tail, ÷ messages received.",
  );

  /** The presence table's line for one size: its run without presence, then with. */
  function presenceRow(off, on) {
    const intervals = Math.max(1, on.runMs / on.intervalMs);
    const calls = on.presenceSends / intervals;
    return `| ${on.size.toLocaleString("en")} | ${on.relays} | ${intervals.toFixed(1)} | ${(on.presence.intervalMost / intervals).toFixed(2)} | ${on.presence.announceMost} | ${on.presence.states} | ${calls.toFixed(1)} | ${off.p50.toFixed(1)} → ${on.p50.toFixed(1)} ms | ${off.p99.toFixed(1)} → ${on.p99.toFixed(1)} ms |`;
  }

  /** One size: a fresh Worker, `size` subscribers (with `?presence=1` when `presence`), the publisher, the tally. */
  async function runSize(size, presence = false) {
    const fg = await startFloodgate({
      ...(opts.presence ? { PRESENCE_INTERVAL: "2s" } : {}),
      READ_RATE: "",
      SUBSCRIBE_RATE: "",
      PUBLISH_RATE: "",
      PUBLISH_BURST: "",
      // Every subscriber is the same client (one address, no token): the per-client cap must not bind.
      MAX_SUBSCRIPTIONS_PER_CLIENT: String(size),
      ...extraVars,
    });
    const channel = `public:fanout.n${size}`;
    const query = new URLSearchParams();
    if (opts.batch) query.set("batch", "1");
    if (presence) query.set("presence", "1");
    const wsUrl = `${fg.base.replace(/^http/, "ws")}/v1/subscribe/${channel}${query.size ? `?${query}` : ""}`;
    // --presence: the publisher starts while the crowd joins.
    const crowd = opts.presence;
    const threads = Math.max(1, opts.clients || Math.min(4, Math.ceil(size / 1000)));
    const clients = [];
    try {
      for (let k = 0; k < threads; k++) {
        const n = Math.floor(size / threads) + (k < size % threads ? 1 : 0);
        clients.push(startClient({ wsUrl, n, maxSeq: PUBLISHES + 16 }));
      }
      const opening = Promise.all(clients.map((c) => c.ask("open")));
      const joined = async () => {
        const opened = await opening;
        const failed = opened.reduce((a, o) => a + o.failed, 0);
        const retried = opened.reduce((a, o) => a + o.retried, 0);
        if (retried > 0) console.log(`  ${size} subscribers: ${retried} handshakes tried again`);
        if (failed > 0) throw new Error(`${failed} of ${size} subscribers could not connect`);
      };
      if (!crowd) await joined();
      const stats = () =>
        fetch(`${fg.base}/v1/channels/${channel}/stats`, { headers: { authorization: `Bearer ${fg.admin}` } }).then(
          (r) => r.json(),
        );
      // The channel counts a subscriber once its object has accepted the socket.
      let before = await stats();
      for (let i = 0; i < 50 && before.websockets < size && !crowd; i++) {
        await new Promise((r) => setTimeout(r, 200));
        before = await stats();
      }
      if (before.websockets !== size && !crowd) {
        throw new Error(`the channel counts ${before.websockets} of ${size} sockets`);
      }

      const token = await mintToken(fg, { sub: "fanout", channels: [channel], rl: "1000000/s" });
      const clientCpu0 = process.cpuUsage();
      const cpu0 = cpuMicros(fg.pid);
      const firstAt = now();
      const answers = [];
      for (let i = 0; i < PUBLISHES; i++) {
        const due = firstAt + (i * 1000) / opts.rate;
        const wait = due - now();
        if (wait > 0) await new Promise((r) => setTimeout(r, wait));
        answers.push(
          fetch(`${fg.base}/v1/publish/${channel}`, {
            method: "POST",
            headers: { authorization: `Bearer ${token}`, "content-type": "application/json" },
            body: JSON.stringify({ i, t: now() }),
          })
            .then(async (res) => ({ status: res.status, body: await res.json().catch(() => null) }))
            .catch(() => ({ status: 0, body: null })),
        );
      }
      const results = await Promise.all(answers);
      if (crowd) await joined();
      const delivered = results.filter((r) => r.status === 200 && Number.isInteger(r.body?.seq)).map((r) => r.body.seq);

      // The tail: until every subscriber has every delivered frame, or nothing arrived for 2 s, or --settle
      // seconds passed (then what is still on its way counts as lost: the table's lost column says so).
      const expected = delivered.length * size;
      let last = -1;
      let lastMoved = now();
      let cutOff = true;
      for (const start = now(); now() - start < opts.settle * 1000; ) {
        const received = (await Promise.all(clients.map((c) => c.ask("count")))).reduce((a, n) => a + n, 0);
        if (received >= expected) {
          cutOff = false;
          break;
        }
        if (received !== last) {
          last = received;
          lastMoved = now();
        } else if (now() - lastMoved > 2000) {
          cutOff = false;
          break;
        }
        await new Promise((r) => setTimeout(r, 100));
      }
      const cpu1 = cpuMicros(fg.pid);
      const clientCpu = process.cpuUsage(clientCpu0);
      const after = await stats();

      const tallies = await Promise.all(clients.map((c) => c.ask("tally", delivered)));
      const frames = tallies.reduce((a, t) => a + t.frames, 0);
      const messages = tallies.reduce((a, t) => a + t.messages, 0);
      const latencies = new Float64Array(tallies.reduce((a, t) => a + t.latencies.length, 0));
      let at = 0;
      for (const t of tallies) {
        latencies.set(t.latencies, at);
        at += t.latencies.length;
      }
      latencies.sort();
      const pct = (q) =>
        latencies.length ? latencies[Math.min(latencies.length - 1, Math.floor(q * latencies.length))] : Number.NaN;
      const lastFrameAt = Math.max(...tallies.map((t) => t.lastFrameAt));
      const hasRelays = typeof after.relay_sends_total === "number";
      return {
        size,
        sent: PUBLISHES,
        delivered: delivered.length,
        deliveriesPerS: messages ? messages / ((lastFrameAt - firstAt) / 1000) : 0,
        p50: pct(0.5),
        p99: pct(0.99),
        lost: crowd
          ? "– (joining)"
          : `${tallies.reduce((a, t) => a + t.lost, 0)}${cutOff ? ` (frames still arriving after --settle ${opts.settle} s)` : ""}`,
        runMs: now() - firstAt,
        intervalMs: presenceIntervalMs(extraVars.PRESENCE_INTERVAL ?? "2s"),
        presenceSends: after.presence?.sends_total ?? 0,
        presence: {
          intervalMost: Math.max(0, ...tallies.map((t) => t.presence.intervalMost)),
          announceMost: Math.max(0, ...tallies.map((t) => t.presence.announceMost)),
          states: tallies.reduce((a, t) => a + t.presence.states, 0),
        },
        duplicated: tallies.reduce((a, t) => a + t.duplicated, 0),
        closed: tallies.reduce((a, t) => a + t.closed, 0),
        // From the moment the last publish was sent: a channel that keeps up ends within milliseconds.
        tailS: (lastFrameAt - (firstAt + ((PUBLISHES - 1) * 1000) / opts.rate)) / 1000,
        relays: typeof after.relays === "number" ? after.relays : "–",
        sendsPerPublish: hasRelays
          ? ((after.relay_sends_total - (before.relay_sends_total ?? 0)) / Math.max(1, delivered.length)).toFixed(2)
          : "1 (no relays)",
        framesPerMessage: messages ? frames / messages : Number.NaN,
        cpuPerDelivery: (cpu1 - cpu0) / messages,
        clientCpuPerDelivery: (clientCpu.user + clientCpu.system) / messages,
      };
    } finally {
      await Promise.all(clients.map((c) => c.stop()));
      await fg.stop();
    }
  }
}

/** `PRESENCE_INTERVAL` as the bench sets it (`2s`, `500ms`, `1m`), in ms. */
function presenceIntervalMs(text) {
  const m = /^(\d+(?:\.\d+)?)(ms|s|m)$/.exec(String(text).trim());
  if (!m) return Number.NaN;
  return Number(m[1]) * { ms: 1, s: 1000, m: 60_000 }[m[2]];
}

/** The 1, 5 and 15 minute load averages. */
function loadAverage() {
  return loadavg()
    .map((x) => x.toFixed(2))
    .join(" ");
}

/** How often a subscriber's handshake is tried before it counts as failed. */
const OPEN_ATTEMPTS = 4;

/** A subscriber thread, with `ask(command, data)` answered by its next reply. */
function startClient(data) {
  const worker = new Worker(new URL(import.meta.url), { workerData: data });
  const waiting = [];
  worker.on("message", (m) => waiting.shift()?.resolve(m));
  worker.on("error", (e) => {
    for (const w of waiting.splice(0)) w.reject(e);
  });
  return {
    ask: (command, payload) =>
      new Promise((resolve, reject) => {
        waiting.push({ resolve, reject });
        worker.postMessage({ command, payload });
      }),
    stop: () => worker.terminate(),
  };
}

/**
 * One thread's subscribers: `n` WebSockets on `wsUrl`, each counting the seqs it receives (a byte
 * per seq up to `maxSeq`) and the time from each message's send (its `t`) to its arrival. A frame is
 * one message, or (packed frames) an array of them: `frames` counts text frames, `messages` messages.
 */
async function subscriberThread({ wsUrl, n, maxSeq }) {
  const seen = [];
  const latencies = [];
  let frames = 0;
  let messages = 0;
  let closed = 0;
  let lastFrameAt = 0;
  let stopping = false;
  // A relay sends one frame text to each of its sockets: parsed once per thread and shared (a few
  // texts back), the harness spends its CPU on counting rather than on parsing the same text a
  // thousand times, and leaves the cores to the workerd it measures. Read only, never changed.
  const parsedTexts = new Map();
  const parseShared = (text) => {
    let parsed = parsedTexts.get(text);
    if (parsed === undefined) {
      parsed = JSON.parse(text);
      if (parsedTexts.size >= 64) parsedTexts.delete(parsedTexts.keys().next().value);
      parsedTexts.set(text, parsed);
    }
    return parsed;
  };
  // Presence frames: `interval` and `join`/`leave` per socket, `state` in all.
  const presence = { interval: [], announce: [], states: 0 };
  // A handshake refused in the connection storm (the listen backlog, an accept that came too late)
  // is tried again a few times; only one that never opens counts as failed.
  let retried = 0;
  const open = (counts) => {
    const me = presence.interval.length;
    presence.interval.push(0);
    presence.announce.push(0);
    const attempt = (left) =>
      new Promise((resolve) => {
        const ws = new WebSocket(wsUrl);
        let opened = false;
        ws.onopen = () => {
          opened = true;
          resolve({ ws, ok: true });
        };
        ws.onerror = () => {
          if (opened) return;
          if (left === 0) return resolve({ ws, ok: false });
          retried++;
          setTimeout(() => attempt(left - 1).then(resolve), 250);
        };
        ws.onclose = () => {
          if (opened && !stopping) closed++;
        };
        ws.onmessage = (e) => {
          const at = now();
          frames++;
          lastFrameAt = at;
          const parsed = parseShared(e.data);
          for (const m of Array.isArray(parsed) ? parsed : [parsed]) {
            if (m.type === "presence") {
              if (m.action === "interval") presence.interval[me]++;
              else if (m.action === "state") presence.states++;
              else presence.announce[me]++;
              continue;
            }
            if (m.type !== "message") continue;
            messages++;
            if (Number.isInteger(m.seq) && m.seq > 0 && m.seq <= maxSeq) counts[m.seq]++;
            if (typeof m.data?.t === "number") latencies.push(at - m.data.t);
          }
        };
      });
    return attempt(OPEN_ATTEMPTS - 1);
  };
  parentPort.on("message", async ({ command, payload }) => {
    if (command === "open") {
      let failed = 0;
      // 100 handshakes in flight at a time: thousands at once overflow the listen backlog.
      for (let k = 0; k < n; k += 100) {
        const batch = Array.from({ length: Math.min(100, n - k) }, () => {
          const counts = new Uint8Array(maxSeq + 1);
          seen.push(counts);
          return open(counts);
        });
        failed += (await Promise.all(batch)).filter((r) => !r.ok).length;
      }
      parentPort.postMessage({ failed, retried });
    } else if (command === "count") {
      parentPort.postMessage(messages);
    } else if (command === "tally") {
      let lost = 0;
      let duplicated = 0;
      for (const counts of seen) {
        for (const seq of payload) if (counts[seq] === 0) lost++;
        for (const c of counts) if (c > 1) duplicated += c - 1;
      }
      stopping = true;
      const out = Float64Array.from(latencies);
      const most = (xs) => xs.reduce((a, x) => Math.max(a, x), 0);
      const summary = {
        intervalMost: most(presence.interval),
        announceMost: most(presence.announce),
        states: presence.states,
      };
      parentPort.postMessage(
        { frames, messages, lost, duplicated, closed, lastFrameAt, latencies: out, presence: summary },
        [out.buffer],
      );
    }
  });
}

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
