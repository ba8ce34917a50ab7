// What `npm run bench` sends, shared by its 2 s rounds (scenarios.mjs) and its fine check
// (fine-check.mjs): the bench Worker's variables, the tokens' grants, the shapes of its requests, and
// the crowds of subjects.
import { publishOpts } from "../lib/bench.mjs";
import { mintToken } from "../lib/tokens.mjs";

// Limiter on for every publish (a generous per-token rl), off by default so tokens decide. The read
// budget is off too, and the per-client subscription cap raised: hundreds of anonymous subscribers
// from one address are the load being measured.
export const NO_DEFAULT_LIMITS = {
  PUBLISH_RATE: "",
  PUBLISH_BURST: "",
  READ_RATE: "",
  MAX_SUBSCRIPTIONS_PER_CLIENT: "100000",
  ANONYMOUS_SHARE: "1",
  MAX_CONNECTIONS_PER_CLIENT: "100000",
  // Summaries of drops on one channel only (drop50sum): every other scenario runs without a rule.
  THROTTLE_SUMMARY: JSON.stringify({ "public:bench.halfsum": "/emoji" }),
  // Audience shards (docs/api.md, "Shards"): a sharded publish against an unsharded one (shard1 vs
  // pub1), and a broadcast into 10 shards (broadcast10).
  AUDIENCE_SHARDS: JSON.stringify({ "public:bench.sharded": { by: "group" }, "public:bench.bcast": { by: "group" } }),
};
export const generous = "1000000/s";
export const channels = ["public:bench.*"];
// Subscribers of the publish channel Floodgate and the literal recipe are compared on (pub10, recipe10).
export const RECIPE_SUBSCRIBERS = 10;
// The Pusher channel the door's publishes go to (pusher10; the Floodgate channel `pusher:bench-ten`).
export const PUSHER_BENCH_CHANNEL = "bench-ten";
// The drop flood: as many connections as the measurement it repeats, 30 KB bodies.
export const FLOOD_CONNECTIONS = 100;
export const FLOOD_BODY = JSON.stringify({ pad: "x".repeat(30_000) });
// Shards a broadcast goes into (broadcast10).
export const BROADCAST_SHARDS = 10;

/** A publish's load options without its path (for a Worker whose URL already names the route). */
export const withoutPath = ({ path: _, ...o }) => o;

/** A publish of `token` to `channel` on `worker` (`body`: instead of the usual small one). */
export function publish(worker, token, channel, body) {
  const { path, ...opts } = publishOpts(token, channel);
  return { url: worker.base + path, pid: worker.pid, opts: body ? { ...opts, body } : opts };
}

/** A broadcast publish into every shard of `channel` on `worker`. */
export function broadcast(worker, token, channel) {
  const { path, headers, ...opts } = publishOpts(token, channel);
  return {
    url: worker.base + path,
    pid: worker.pid,
    opts: { ...opts, headers: { ...headers, "floodgate-shard": "*" } },
  };
}

/** Publishes from every token of `tokens` in turn (on `worker`), subject k always to `channelOf(k)`. */
export function many(worker, tokens, channelOf) {
  let i = 0;
  const body = JSON.stringify({ emoji: "🔥", at: 1 });
  const setupRequest = (req) => {
    const k = i++ % tokens.length;
    return {
      ...req,
      method: "POST",
      path: `/v1/publish/${channelOf(k)}`,
      headers: { authorization: `Bearer ${tokens[k]}`, "content-type": "application/json" },
      body,
    };
  };
  return { url: worker?.base, worker, pid: worker?.pid, opts: { requests: [{ setupRequest }] } };
}

/** A token for each of `spread` subjects, on `worker`. */
export async function mintMany(worker, spread) {
  const tokens = [];
  for (let k = 0; k < spread; k++) tokens.push(await mintToken(worker, { sub: `spread${k}`, channels, rl: generous }));
  return tokens;
}

/**
 * Tokens for `spread` new subjects named `<prefix><k>`, minted 25 at a time (the cold crowd mints a
 * crowd per slice, between slices).
 */
export async function mintCrowd(worker, prefix, spread) {
  const tokens = [];
  for (let k = 0; k < spread; k += 25) {
    const batch = Array.from({ length: Math.min(25, spread - k) }, (_, j) =>
      mintToken(worker, { sub: `${prefix}${k + j}`, channels, rl: generous }),
    );
    tokens.push(...(await Promise.all(batch)));
  }
  return tokens;
}

/**
 * One publish from every subject (subject k to `channelOf(k)`), 50 at a time: run right before each
 * many-subject run, because local workerd evicts an object left idle for about 10 s, and a run that
 * starts on 1,000 evicted objects measures their restart (4× slower here), not steady traffic.
 */
export async function touchAll(base, tokens, channelOf) {
  for (let k = 0; k < tokens.length; k += 50) {
    await Promise.all(
      tokens.slice(k, k + 50).map((t, j) =>
        fetch(`${base}/v1/publish/${channelOf(k + j)}`, {
          method: "POST",
          headers: { authorization: `Bearer ${t}`, "content-type": "application/json" },
          body: "{}",
        }).then((r) => r.arrayBuffer()),
      ),
    );
  }
}
