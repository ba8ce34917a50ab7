// One size of `npm run bench:fanout`: a fresh Floodgate, `size` subscribers spread over threads, one
// publisher at a steady rate, the tail until every frame is in (with --max-rate: until every message
// is received or counted skipped), and the tally as one row of the report.
import { startSocketFloor } from "../lib/bench.mjs";
import { PUSHER_APP } from "../lib/pusher-app.mjs";
import { mintToken } from "../lib/tokens.mjs";
import { cpuMicros, startFloodgate } from "../lib/workerd.mjs";
import { now } from "./clock.mjs";
import { startSubscriberThread } from "./subscriber-threads.mjs";

/**
 * Runs one size and resolves to its row (report.mjs prints it). `settings` are the bench's options
 * (`rate`, `seconds`, `clients`, `settle`, `batch`, `presence`), `extraVars` the --vars given, and
 * `publishes` how many publishes the publisher sends. `presence`: every subscriber asks for it.
 * `door`: "native" (Floodgate's own WebSockets on a public channel), "pusher" (Pusher connections on
 * a `pusher:` channel, each subscribing as pusher-js does; the same publishes, as Pusher events) or
 * "floor" (the socket floor's WebSockets, sending `framesPerMessage` frames per message).
 */
export async function runSize(
  size,
  presence,
  { settings: opts, extraVars, publishes: PUBLISHES, maxRate = null, framesPerMessage = 1 },
  door = "native",
) {
  const pusher = door === "pusher";
  // --floor: the socket floor (lib/bench-socket-floor-worker.mjs) answers the same routes the run uses.
  const fg =
    door === "floor"
      ? await startSocketFloor({ framesPerMessage })
      : await startFloodgate({
          ...PUSHER_APP,
          ...(opts.presence ? { PRESENCE_INTERVAL: "2s" } : {}),
          READ_RATE: "",
          SUBSCRIBE_RATE: "",
          PUBLISH_RATE: "",
          PUBLISH_BURST: "",
          // Every subscriber is the same client (one address, no token): the per-client cap must not bind.
          MAX_SUBSCRIPTIONS_PER_CLIENT: String(size),
          // ... and one anonymous client over one channel: neither the anonymous share nor its connections.
          ANONYMOUS_SHARE: "1",
          MAX_CONNECTIONS_PER_CLIENT: String(size + 100),
          ...extraVars,
        });
  const channel = pusher ? `pusher:fanout-n${size}` : `public:fanout.n${size}`;
  // The subscribers' kind of connection (subscriber-thread.mjs, KINDS) and the URL they open.
  const kind = pusher ? "pusher" : "floodgate";
  const query = new URLSearchParams();
  if (opts.batch) query.set("batch", "1");
  if (presence) query.set("presence", "1");
  // --max-rate: every subscriber asks for its own rate (docs/api.md, "Each reader's rate").
  if (maxRate) query.set("max_rate", maxRate);
  const wsBase = fg.base.replace(/^http/, "ws");
  const wsUrl = pusher
    ? `${wsBase}/app/${PUSHER_APP.PUSHER_APP_KEY}?protocol=7&subscribe=${channel.slice("pusher:".length)}`
    : `${wsBase}/v1/subscribe/${channel}${query.size ? `?${query}` : ""}`;
  // --presence: the publisher starts while the crowd joins.
  const crowd = opts.presence;
  const threads = Math.max(1, opts.clients || Math.min(4, Math.ceil(size / 1000)));
  const clients = [];
  try {
    for (let k = 0; k < threads; k++) {
      const n = Math.floor(size / threads) + (k < size % threads ? 1 : 0);
      clients.push(startSubscriberThread({ kind, url: wsUrl, n, maxSeq: PUBLISHES + 16 }));
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
      fetch(`${fg.base}/v1/channels/${channel}/stats`, { headers: { authorization: `Bearer ${fg.admin}` } }).then((r) =>
        r.json(),
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
          // On a pusher: channel a message is a Pusher event, its data JSON text.
          body: JSON.stringify(pusher ? { event: "fanout", data: JSON.stringify({ i, t: now() }) } : { i, t: now() }),
        })
          .then(async (res) => ({ status: res.status, body: await res.json().catch(() => null) }))
          .catch(() => ({ status: 0, body: null })),
      );
    }
    const results = await Promise.all(answers);
    if (crowd) await joined();
    const delivered = results.filter((r) => r.status === 200 && Number.isInteger(r.body?.seq)).map((r) => r.body.seq);
    // A Pusher event carries no seq: its subscribers count publish i under i + 1 (pusher-connection.mjs),
    // so lost and duplicated are counted by publish, not by the seq it got.
    const counted = pusher
      ? results.flatMap((r, k) => (r.status === 200 && Number.isInteger(r.body?.seq) ? [k + 1] : []))
      : delivered;

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

    const tallies = await Promise.all(clients.map((c) => c.ask("tally", counted)));
    const frames = tallies.reduce((a, t) => a + t.frames, 0);
    const sum = (f) => tallies.reduce((a, t) => a + f(t), 0);
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
      door,
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
      // What workerd spent per published message per subscriber (Worker, channel and relays together),
      // whether the subscriber took the message or its relay skipped it for its rate.
      cpuPerOffer: (cpu1 - cpu0) / Math.max(1, delivered.length * size),
      maxRate,
      skipped: sum((t) => t.skipped),
      accountsOff: sum((t) => t.accountsOff),
      receivedPerSubscriber: [
        Math.min(...tallies.map((t) => t.receivedFewest)),
        Math.max(...tallies.map((t) => t.receivedMost)),
      ],
      publishSeconds: (PUBLISHES - 1) / opts.rate || 1,
      clientCpuPerDelivery: (clientCpu.user + clientCpu.system) / messages,
    };
  } finally {
    await Promise.all(clients.map((c) => c.stop()));
    await fg.stop();
  }
}

/** `PRESENCE_INTERVAL` as the bench sets it (`2s`, `500ms`, `1m`), in ms. */
function presenceIntervalMs(text) {
  const m = /^(\d+(?:\.\d+)?)(ms|s|m)$/.exec(String(text).trim());
  if (!m) return Number.NaN;
  return Number(m[1]) * { ms: 1, s: 1000, m: 60_000 }[m[2]];
}
