// What only the benchmarks share: the reference Workers they measure Floodgate against, autocannon
// runs, and reading the Worker's admin routes and /metrics. Workers start through workerd.mjs.
import { join } from "node:path";
import autocannon from "autocannon";
import { root } from "./root.mjs";
import { bundle, startWorker } from "./workerd.mjs";

/**
 * Publishes per subject of the cold crowd (`npm run bench`'s crowdcold slices, `bench:profile
 * --scenario crowdcold`): its first, and a few after it.
 */
export const COLD_PUBLISHES = 3;

/**
 * The reference: a bare Hono Worker in its own workerd. `GET /bare` answers a small JSON body;
 * `GET /bare-rpc2` also makes two no-op Durable Object calls in turn (the shape of a limited,
 * delivered publish); `POST /bare` reads the body and answers 429 (what a denied publish must do at
 * least, since the API answers 400/413 (docs/api.md) before any 429); `POST /bare-write1` reads the body and
 * makes one Durable Object call that appends it as one row (the least a durable publish can cost).
 */
export async function startBare() {
  const contents = await bundle({
    stdin: {
      contents: `import { Hono } from "hono";
import { DurableObject } from "cloudflare:workers";
export class Noop extends DurableObject {
  ping() { return 1; }
  write() {
    this.ctx.storage.sql.exec("CREATE TABLE IF NOT EXISTS t (k INTEGER PRIMARY KEY, v INTEGER)");
    this.ctx.storage.sql.exec("INSERT OR REPLACE INTO t (k, v) VALUES (1, ?)", Date.now());
    return 1;
  }
  append(data) {
    if (!this.logReady) {
      this.ctx.storage.sql.exec("CREATE TABLE IF NOT EXISTS log (seq INTEGER PRIMARY KEY, data TEXT)");
      this.logReady = true;
    }
    return this.ctx.storage.sql.exec("INSERT INTO log (data) VALUES (?) RETURNING seq", data).one().seq;
  }
}
const app = new Hono();
app.get("/bare", (c) => c.json({ ok: true }));
// The cost floor of a publish's shape: one request that makes two Durable Object calls in turn.
app.get("/bare-rpc2", async (c) => {
  await c.env.NOOP.get(c.env.NOOP.idFromName("a")).ping();
  await c.env.NOOP.get(c.env.NOOP.idFromName("b")).ping();
  return c.json({ ok: true });
});
// The same, but each call writes one row (a durable write holds the object's answer until stored).
app.get("/bare-rpc2w", async (c) => {
  await c.env.NOOP.get(c.env.NOOP.idFromName("a")).write();
  await c.env.NOOP.get(c.env.NOOP.idFromName("b")).write();
  return c.json({ ok: true });
});
// The one-write floor: a publish's request, and one object call that stores its body as one row.
app.post("/bare-write1", async (c) => {
  const body = await c.req.text();
  const seq = await c.env.NOOP.get(c.env.NOOP.idFromName("log")).append(body);
  return c.json({ status: "delivered", seq });
});
app.post("/bare", async (c) => {
  const body = await c.req.arrayBuffer();
  return c.json({ code: "resource_exhausted", bytes: body.byteLength }, 429);
});
export default app;`,
      resolveDir: root,
      loader: "ts",
    },
  });
  return startWorker({
    name: "bare",
    modules: [{ type: "ESModule", path: "bare.mjs", contents }],
    durableObjects: { NOOP: { className: "Noop", useSQLite: true } },
  });
}

/**
 * The socket floor (scripts/lib/bench-socket-floor-worker.mjs) in its own workerd: hibernatable
 * WebSockets in objects of 1,000, one `ws.send` per socket per frame, `framesPerMessage` frames per
 * message (below 1: packed). What bench:fanout's --floor compares Floodgate's fan-out with.
 */
export async function startSocketFloor({ framesPerMessage = 1 } = {}) {
  return startWorker({
    name: "floor",
    bindings: { FRAMES_PER_MESSAGE: String(framesPerMessage) },
    modules: [
      {
        type: "ESModule",
        path: "floor.mjs",
        contents: await bundle({ entryPoints: [join(root, "scripts/lib/bench-socket-floor-worker.mjs")] }),
      },
    ],
    durableObjects: { FLOOR: { className: "FloorSockets", useSQLite: true } },
  });
}

/**
 * The literal before-publish recipe (scripts/lib/bench-recipe-worker.mjs) in its own workerd: per message
 * a rate-limiter object call, a KV read and one channel-object call that stores and sends it.
 */
export async function startRecipe({ gcraIntervalMs } = {}) {
  return startWorker({
    name: "recipe",
    ...(gcraIntervalMs ? { bindings: { GCRA_INTERVAL_MS: String(gcraIntervalMs) } } : {}),
    modules: [
      {
        type: "ESModule",
        path: "recipe.mjs",
        contents: await bundle({ entryPoints: [join(root, "scripts/lib/bench-recipe-worker.mjs")] }),
      },
    ],
    kvNamespaces: ["THROTTLE_KV"],
    durableObjects: {
      LIMITER: { className: "GcraLimiter", useSQLite: true },
      CHANNEL: { className: "RecipeChannel", useSQLite: true },
    },
  });
}

/**
 * One autocannon run for `seconds`, or until `amount` requests are done: { rps (autocannon's mean of
 * its per-second counts), rate (requests completed over the time to the last answer; 0 when none
 * came), p50, p99, statuses }.
 */
export async function load(url, opts, { seconds, connections, amount }) {
  let shown = 0;
  const onResponse = (status, body) => {
    if (status >= 500 && shown++ < 2) console.log(`  ${status} from ${url}: ${body}`);
  };
  // Each request of the run also prints its first 5xx bodies (a run made of `requests`, the crowds',
  // keeps them).
  const debug = process.env.BENCH_DEBUG_500
    ? { requests: opts.requests ? opts.requests.map((r) => ({ ...r, onResponse })) : [{ ...opts, onResponse }] }
    : {};
  const started = performance.now();
  const run = autocannon({ url, connections, ...(amount ? { amount } : { duration: seconds }), ...opts, ...debug });
  // Timed to the last answer: autocannon reports only on its next 1 s sample, so a run to `amount`
  // that finished in 0.3 s would otherwise count as 1 s, and every path faster than that the same.
  let last = started;
  run.on("response", () => {
    last = performance.now();
  });
  const r = await run;
  const elapsed = (last - started) / 1000;
  const statuses = Object.fromEntries(Object.entries(r.statusCodeStats ?? {}).map(([code, v]) => [code, v.count]));
  const completed = Object.values(statuses).reduce((a, n) => a + n, 0);
  const rate = completed > 0 && elapsed > 0 ? completed / elapsed : 0;
  return { rps: r.requests.average, rate, p50: r.latency.p50, p99: r.latency.p99, statuses };
}

export function publishOpts(token, channel) {
  return {
    method: "POST",
    path: `/v1/publish/${channel}`,
    headers: { authorization: `Bearer ${token}`, "content-type": "application/json" },
    body: JSON.stringify({ emoji: "🔥", at: 1 }),
  };
}

/** Sets a channel's drop rate on `worker` ({ base, admin }). */
export async function setRate(worker, channel, rate) {
  const res = await fetch(`${worker.base}/v1/admin/throttle/${channel}`, {
    method: "PUT",
    headers: { authorization: `Bearer ${worker.admin}` },
    body: JSON.stringify({ rate }),
  });
  if (res.status !== 200) throw new Error(`set rate failed: ${res.status}`);
}

/** Every series of `worker`'s /metrics ({ base, admin }) as { "name{labels}": value }. */
export async function metrics(worker) {
  const text = await (
    await fetch(`${worker.base}/metrics`, { headers: { authorization: `Bearer ${worker.admin}` } })
  ).text();
  const out = {};
  for (const line of text.split("\n")) {
    if (!line || line.startsWith("#")) continue;
    const i = line.lastIndexOf(" ");
    out[line.slice(0, i)] = Number(line.slice(i + 1));
  }
  return out;
}

export function median(xs) {
  const v = [...xs].sort((a, b) => a - b);
  if (v.length === 0) return Number.NaN;
  return v.length % 2 ? v[(v.length - 1) / 2] : (v[v.length / 2 - 1] + v[v.length / 2]) / 2;
}

export function sumStatuses(list) {
  const out = {};
  for (const r of list) for (const [k, n] of Object.entries(r.statuses)) out[k] = (out[k] ?? 0) + n;
  return out;
}

/**
 * Opens `n` WebSocket subscribers on `channel` of the Worker at `base`, counting the frames they
 * receive: resolves to { counter: { frames }, close }.
 */
export async function webSocketSubscribers(base, channel, n) {
  const counter = { frames: 0 };
  const sockets = await Promise.all(
    Array.from(
      { length: n },
      () =>
        new Promise((resolve, reject) => {
          const ws = new WebSocket(`${base.replace(/^http/, "ws")}/v1/subscribe/${channel}`);
          ws.onopen = () => resolve(ws);
          ws.onerror = () => reject(new Error(`subscribe to ${channel} failed`));
          ws.onmessage = () => {
            counter.frames++;
          };
        }),
    ),
  );
  return {
    counter,
    close: () => {
      for (const ws of sockets) ws.close();
    },
  };
}
