#!/usr/bin/env node
// `npm run load`: steady, paced publish load against a running Floodgate, with live subscribers and a
// progress line every second, so you can watch the throttle and the sampler work.
//
//   npm run load -- --channel public:live.reactions --rate 200/s --duration 60s [--subscribers 50]
//   npm run load -- --summary /emoji     # varied keys at /emoji, and the summaries of drops printed
//
// `npm run load -- --help` lists the options (HELP below).
import { adminToken } from "./lib/admin-token.mjs";
import { importSource } from "./lib/import-source.mjs";
import { options } from "./lib/options.mjs";
import { mintToken } from "./lib/tokens.mjs";

const HELP = `usage: npm run load -- [options]

  --url URL            the Worker (default http://localhost:8787, i.e. \`npm start\`)
  --admin-token T      the admin bearer (default: $FLOODGATE_ADMIN_TOKEN, else ADMIN_TOKEN from
                       .dev.vars, else from .dev.vars.example)
  --channel NAME       default public:live.reactions
  --rate N/s           publishes per second, paced evenly (default 100/s)
  --duration 60s       how long (s, m; default 30s)
  --subscribers N      WebSocket subscribers held open on the channel (default 0)
  --max-in-flight N    publishes allowed in flight at once (default 256); beyond it a tick is
                       counted as "behind" instead of piling up requests
  --rl N/s             the publish budget of the token it mints (default twice --rate, so the
                       budget does not get in the way; --rl 10/s to see 429s)
  --summary POINTER    publish varied values (a few common, many rare) at this JSON Pointer of each
                       message, e.g. /emoji, and print every summary of drops a subscriber receives
                       (the channel needs a THROTTLE_SUMMARY rule with that pointer, and drops: a
                       target or a drop rate; docs/api.md, "Summaries of drops")
  -h, --help           this text

The token it mints has publish+subscribe scope on the channel.`;

const args = options(
  "load",
  {
    url: "http://localhost:8787",
    "admin-token": null,
    channel: "public:live.reactions",
    rate: "100/s",
    duration: "30s",
    subscribers: 0,
    "max-in-flight": 256,
    rl: null,
    summary: null,
  },
  { help: HELP },
);

function fail(message) {
  console.error(`floodgate load: ${message}`);
  process.exit(2);
}

// The Worker's own parsers (src/settings/limits.ts, src/settings/durations.ts), bundled on the fly, so --rate and
// --duration accept exactly what the Worker's configuration does.
const grammar = await importSource(
  `export { parseRateShorthand } from "./src/settings/limits"; export { parseDuration } from "./src/settings/durations";`,
);

/** `--rate` as publishes per second. */
function parseRate(text) {
  let r;
  try {
    r = grammar.parseRateShorthand(text);
  } catch (e) {
    fail(`--rate must look like 200/s, 30/m or 5/100ms: ${e.message}`);
  }
  if (!r) fail("--rate must be positive");
  return (r.rate * 1000) / r.perMs;
}

function parseDuration(text) {
  try {
    return grammar.parseDuration(text);
  } catch (e) {
    fail(`--duration must look like 60s, 2m or 1m30s: ${e.message}`);
  }
}

const base = args.url.replace(/\/$/, "");
const admin = args["admin-token"] ?? adminToken();
const channel = args.channel;
const ratePerSecond = parseRate(args.rate);
const durationMs = parseDuration(args.duration);
const subscriberCount = Number(args.subscribers);
const maxInFlight = Number(args["max-in-flight"]);
const rl = args.rl ?? `${Math.max(1, Math.ceil(ratePerSecond * 2))}/s`;
if (!Number.isInteger(subscriberCount) || subscriberCount < 0) fail("--subscribers must be a whole number ≥ 0");

const adminHeaders = { authorization: `Bearer ${admin}`, "content-type": "application/json" };

// ---- --summary: varied keys, and the summaries of drops (docs/api.md, "Summaries of drops") ----

/** `--summary` as reference tokens (RFC 6901), or null without it. */
const summaryTokens = args.summary === null ? null : pointerTokens(args.summary);

function pointerTokens(text) {
  if (text === "") return [];
  if (!text.startsWith("/") || /~(?![01])/.test(text)) fail(`--summary must be a JSON Pointer such as /emoji`);
  return text
    .slice(1)
    .split("/")
    .map((t) => t.replace(/~1/g, "/").replace(/~0/g, "~"));
}

/** The values published at the pointer: a few common ones and a long tail, so top 20 and "(other)" both show. */
const SUMMARY_VALUES = ["🔥", "👏", "❤️", "😂", "😮", "🎉", "👍", "💯", "🙌", "😢"];

/** The i-th message's value at the pointer: Zipf-like over the common values, then rare ones. */
function summaryValue(i) {
  const r = ((i * 2654435761) >>> 0) / 2 ** 32; // a fixed spread, not a random draw
  if (r < 0.9) return SUMMARY_VALUES[Math.floor(SUMMARY_VALUES.length * r * r) % SUMMARY_VALUES.length];
  return `rare-${i % 40}`;
}

/** The body of the i-th message: its value set at the pointer (objects made on the way). */
function summaryBody(i) {
  const value = summaryValue(i);
  if (summaryTokens.length === 0) return value;
  const body = { n: i, at: Date.now() };
  let at = body;
  for (const [k, t] of summaryTokens.entries()) {
    if (k === summaryTokens.length - 1) at[t] = value;
    else at = at[t] ??= {};
  }
  return body;
}

/** One summary frame as a line: its interval, drops and largest keys. */
function summaryLine(s) {
  const keys = Object.entries(s.by_key)
    .sort(([a, x], [b, y]) => Number(a === "(other)") - Number(b === "(other)") || y - x)
    .map(([k, n]) => `${k} ${n}`);
  return `summary ${new Date(s.from).toISOString().slice(11, 23)}–${new Date(s.to).toISOString().slice(11, 23)}  dropped ${s.dropped}: ${keys.join(" · ")}`;
}

async function mint() {
  try {
    return await mintToken({ base, admin }, { sub: `load-${process.pid}`, channels: [channel], ttl: "24h", rl });
  } catch (e) {
    if (e.status === 0) fail(`cannot reach ${base} — is the server running? (npm start in another terminal)`);
    if (e.status === 401) fail("the admin token was refused (--admin-token, or FLOODGATE_ADMIN_TOKEN)");
    fail(e.message);
  }
}

const token = await mint();

/** The subscriber that prints summaries (with --summary). */
let watcher = null;
if (summaryTokens !== null) {
  const manifest = await fetch(`${base}/v1/manifest`).then(
    (r) => r.json(),
    () => null,
  );
  const rules = manifest?.summaries?.rules ?? [];
  if (rules.length === 0)
    console.log(
      `floodgate load: the server has no THROTTLE_SUMMARY rule; start it with one, e.g. npm start -- --var 'THROTTLE_SUMMARY:{"${channel}":"${args.summary}"}'`,
    );
  // One more subscriber, which prints every summary it receives.
  watcher = new WebSocket(`${base.replace(/^http/, "ws")}/v1/subscribe/${channel}?batch=1`, [
    "floodgate",
    `bearer.${token}`,
  ]);
  watcher.onmessage = (ev) => {
    const frames = JSON.parse(ev.data);
    for (const f of Array.isArray(frames) ? frames : [frames]) if (f.type === "summary") console.log(summaryLine(f));
  };
  watcher.onerror = () => {};
  await new Promise((resolve) => {
    watcher.addEventListener("open", resolve, { once: true });
    watcher.addEventListener("close", resolve, { once: true });
  });
}
const counts = { sent: 0, delivered: 0, dropped: 0, limited: 0, errors: 0, behind: 0, frames: 0, messages: 0 };
const window = { delivered: 0, dropped: 0, sent: 0 };
/**
 * When the throttle's first decision took effect (the first 202) and what had been delivered by then:
 * the summary's rate since then is the one to hold against the target, without the run's unthrottled
 * first seconds averaged in.
 */
let firstDrop = null;
/** When the last answer came: the run's throttled stretch ends there, not at the summary's wait. */
let lastPublishAt = 0;
let inFlight = 0;

const sockets = [];
for (let i = 0; i < subscriberCount; i++) {
  // The token as a subprotocol, not in the URL (docs/api.md, "Subscriber tokens"); packed frames
  // (`?batch=1`, docs/api.md, "Packed frames"), as the client asks for them: each frame is an array.
  const ws = new WebSocket(`${base.replace(/^http/, "ws")}/v1/subscribe/${channel}?batch=1`, [
    "floodgate",
    `bearer.${token}`,
  ]);
  ws.onmessage = (ev) => {
    counts.frames++;
    const packed = JSON.parse(ev.data);
    counts.messages += Array.isArray(packed) ? packed.length : 1;
  };
  ws.onerror = () => {};
  sockets.push(ws);
}
if (subscriberCount > 0) {
  await Promise.all(
    sockets.map(
      (ws) =>
        new Promise((resolve) => {
          ws.addEventListener("open", resolve, { once: true });
          ws.addEventListener("close", resolve, { once: true });
        }),
    ),
  );
  const open = sockets.filter((ws) => ws.readyState === WebSocket.OPEN).length;
  if (open < subscriberCount) console.log(`floodgate load: ${subscriberCount - open} subscribers could not connect`);
}

async function publishOne(i) {
  inFlight++;
  counts.sent++;
  window.sent++;
  try {
    const res = await fetch(`${base}/v1/publish/${channel}`, {
      method: "POST",
      headers: { authorization: `Bearer ${token}`, "content-type": "application/json" },
      body: JSON.stringify(summaryTokens === null ? { n: i, emoji: "🔥", at: Date.now() } : summaryBody(i)),
    });
    await res.arrayBuffer();
    lastPublishAt = Date.now();
    if (res.status === 200) {
      counts.delivered++;
      window.delivered++;
    } else if (res.status === 202) {
      if (firstDrop === null) firstDrop = { at: Date.now(), delivered: counts.delivered };
      counts.dropped++;
      window.dropped++;
    } else if (res.status === 429) counts.limited++;
    else counts.errors++;
  } catch {
    counts.errors++;
  } finally {
    inFlight--;
  }
}

async function channelStats() {
  try {
    const res = await fetch(`${base}/v1/channels/${channel}/stats`, { headers: adminHeaders });
    return res.ok ? await res.json() : null;
  } catch {
    return null;
  }
}

const targetText = (t) =>
  t === null || t === undefined ? "none" : typeof t === "string" ? t : `${t.deliveries} deliveries`;

console.log(
  `floodgate load: ${ratePerSecond}/s to ${channel} for ${durationMs / 1000}s at ${base}, ${subscriberCount} subscribers (Ctrl-C stops early)`,
);
const started = Date.now();
let next = 0;
let stopping = false;
process.on("SIGINT", () => {
  stopping = true;
});

// Paced: publish i goes out at started + i / rate, checked every few ms, so load is steady, not bursty.
const pacer = setInterval(() => {
  const now = Date.now();
  const due = Math.min(
    Math.floor(((now - started) * ratePerSecond) / 1000),
    Math.floor((durationMs * ratePerSecond) / 1000),
  );
  while (next < due) {
    if (inFlight >= maxInFlight) {
      counts.behind += due - next;
      next = due;
      break;
    }
    void publishOne(next++);
  }
}, 5);

let lastTick = started;
/** The last seconds' deliveries, for the windowed rate: one second's count swings with the loop's period. */
const recent = [];
const WINDOW_S = 5;
/** Lines print in tick order even when a stats call answers late (each waits for the one before). */
let printing = Promise.resolve();
const ticker = setInterval(() => {
  const now = Date.now();
  const secs = (now - lastTick) / 1000;
  lastTick = now;
  const snap = { ...window };
  window.delivered = 0;
  window.dropped = 0;
  window.sent = 0;
  recent.push({ secs, delivered: snap.delivered });
  while (recent.length > WINDOW_S) recent.shift();
  const span = recent.reduce((a, r) => a + r.secs, 0);
  const windowed = recent.reduce((a, r) => a + r.delivered, 0) / span;
  const t = Math.round((now - started) / 1000);
  const totals = { ...counts };
  const stats = channelStats();
  printing = printing.then(async () => {
    const s = await stats;
    const rate = s ? s.drop_rate : null;
    console.log(
      `t=${String(t).padStart(3)}s sent ${totals.sent} (${Math.round(snap.sent / secs)}/s)  delivered ${totals.delivered}  dropped ${totals.dropped}  429s ${totals.limited}  errors ${totals.errors}${totals.behind ? `  behind ${totals.behind}` : ""}  | drop rate ${rate === null ? "?" : rate.toFixed(3)}  delivered ${Math.round(snap.delivered / secs)}/s (${Math.round(span)} s: ${windowed.toFixed(1)}/s) vs target ${targetText(s?.target)}  occupancy ${s?.occupancy ?? "?"}`,
    );
  });
}, 1000);

await new Promise((resolve) => {
  const check = setInterval(() => {
    if (stopping || (next >= Math.floor((durationMs * ratePerSecond) / 1000) && inFlight === 0)) {
      clearInterval(check);
      resolve();
    }
  }, 20);
});
clearInterval(pacer);
clearInterval(ticker);
await printing;
// Let the last frames arrive before counting what subscribers saw (and, with --summary, the last
// interval's summary: up to SUMMARY_INTERVAL later).
await new Promise((r) => setTimeout(r, watcher ? 2000 : 500));
for (const ws of sockets) ws.close();
watcher?.close();

const elapsed = (Date.now() - started) / 1000;
const stats = await channelStats();
console.log("\nsummary");
console.log(`  sent        ${counts.sent} in ${elapsed.toFixed(1)}s (${(counts.sent / elapsed).toFixed(1)}/s)`);
console.log(`  delivered   ${counts.delivered} (${(counts.delivered / elapsed).toFixed(1)}/s over the whole run)`);
if (firstDrop) {
  const since = (lastPublishAt - firstDrop.at) / 1000;
  const n = counts.delivered - firstDrop.delivered;
  console.log(
    `              ${n} since the first drop at t=${((firstDrop.at - started) / 1000).toFixed(1)}s (${since > 0 ? (n / since).toFixed(1) : "?"}/s while throttled: compare this with the target)`,
  );
} else {
  console.log("              nothing was dropped: the throttle never cut in (no target, or the load stayed under it)");
}
console.log(`  dropped     ${counts.dropped} (${((100 * counts.dropped) / Math.max(1, counts.sent)).toFixed(1)}%)`);
console.log(
  `  429s        ${counts.limited}   errors ${counts.errors}${counts.behind ? `   behind ${counts.behind}` : ""}`,
);
if (subscriberCount > 0) {
  console.log(
    `  subscribers ${subscriberCount}, ${counts.messages} messages in ${counts.frames} frames (${(counts.messages / Math.max(1, subscriberCount)).toFixed(0)} each; delivered publishes: ${counts.delivered})`,
  );
}
if (stats) {
  // Open subscriptions on every relay (docs/api.md, "Presence"), as the channel counts them now.
  console.log(`  occupancy   ${stats.occupancy} open subscriptions`);
  console.log(`  drop rate   ${stats.drop_rate} now, target ${targetText(stats.target)}`);
  if (stats.last_sample) {
    const s = stats.last_sample;
    console.log(
      `  last sample offered ${s.offered_rate}/s, allowed ${s.allowed_rate ?? "∞"}/s → rate ${s.new_rate} (${s.written ? "written" : "unchanged"})`,
    );
  }
}
process.exit(counts.errors > 0 ? 1 : 0);
