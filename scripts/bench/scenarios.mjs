// What each scenario of `npm run bench`'s 2 s rounds runs: the Workers it needs (Floodgate, the bare
// reference, a Worker of its own for the many-subject, read-flood and recipe scenarios), their
// subscribers, and the list of scenarios, each a load target with what to count beside it.
import { publishOpts, setRate, startBare, startRecipe, webSocketSubscribers } from "../lib/bench.mjs";
import { PUSHER_APP, pusherEvents, pusherSubscribers } from "../lib/pusher-app.mjs";
import { mintToken } from "../lib/tokens.mjs";
import { startFloodgate } from "../lib/workerd.mjs";
import {
  BROADCAST_SHARDS,
  broadcast,
  channels,
  FLOOD_BODY,
  FLOOD_CONNECTIONS,
  generous,
  many,
  mintMany,
  NO_DEFAULT_LIMITS,
  PUSHER_BENCH_CHANNEL,
  publish,
  RECIPE_SUBSCRIBERS,
  touchAll,
  withoutPath,
} from "./workload.mjs";

/**
 * Starts the Workers and subscribers of the scenarios `config` (the bench's options) wants, and
 * returns { fg, bare, scenarios (the bare GET first), barePost, bareWrite1, close }. `close` closes
 * the subscribers and stops every Worker but `bare`, which the fine check goes on using.
 */
export async function startScenarios(config) {
  const { subscribers: SUBSCRIBERS, spread: SPREAD, wanted } = config;
  // The Pusher door open (pusher10: the door's publishes beside the native ones, pub10).
  const fg = await startFloodgate({ ...NO_DEFAULT_LIMITS, ...PUSHER_APP });
  const bare = await startBare();
  const subscribers = (channel, n, base = fg.base) => webSocketSubscribers(base, channel, n);

  // Many subjects: SPREAD subjects publishing each to its own channel (spread), or all to one channel
  // (crowd: the stadium's reactions). They run against a Worker of its own (its own workerd), so their
  // objects never sit in the memory of the Worker the other scenarios measure.
  const fgMany = wanted("spread") || wanted("crowd") ? await startFloodgate(NO_DEFAULT_LIMITS) : null;
  const manyTokens = fgMany ? await mintMany(fgMany, SPREAD) : [];
  // A read flood: anonymous history reads from one client IP past its read budget (the shipped
  // READ_RATE), on a Worker of its own since `fg` has the read budget off for its anonymous subscribers.
  const fgRead = wanted("readdeny") ? await startFloodgate({}) : null;
  // The literal before-publish recipe (lib/bench-recipe-worker.mjs), in a workerd of its own.
  const recipe = wanted("recipe10") ? await startRecipe() : null;

  await setRate(fg, "public:bench.half", 0.5);
  await setRate(fg, "public:bench.halfsum", 0.5);
  await setRate(fg, "public:bench.ninety", 0.9);
  await setRate(fg, "public:bench.flood30k", 1);
  const subs = {
    one: await subscribers("public:bench.one", 1),
    ten: await subscribers("public:bench.ten", RECIPE_SUBSCRIBERS),
    hundred: await subscribers("public:bench.hundred", SUBSCRIBERS),
    sse: await sseSubscribers(fg.base, "public:bench.sse", SUBSCRIBERS),
    half: await subscribers("public:bench.half", 1),
    halfsum: await subscribers("public:bench.halfsum", 1),
    ninety: await subscribers("public:bench.ninety", 1),
    sharded: await subscribers("public:bench.sharded", 1),
    ...(wanted("broadcast10") ? { bcast: await subscribers("public:bench.bcast", 1) } : {}),
    ...(wanted("pusher10")
      ? { pusher: await pusherSubscribers(fg.base, PUSHER_BENCH_CHANNEL, RECIPE_SUBSCRIBERS) }
      : {}),
    ...(fgMany ? { crowd: await subscribers("public:bench.crowd", 1, fgMany.base) } : {}),
    ...(recipe ? { recipe: await subscribers("public:bench.recipe", RECIPE_SUBSCRIBERS, recipe.base) } : {}),
  };
  /** A publish to `channel` on `fg` by a subject of its own (`sub`), limited generously or by `rl`. */
  const publishAs = async (sub, channel, { rl = generous, body } = {}) =>
    publish(fg, await mintToken(fg, { sub, channels, rl }), channel, body);

  // The bare POST: a publish's headers and body, to the bare Worker (it reads the body, answers 429).
  const barePost = {
    url: `${bare.base}/bare`,
    pid: bare.pid,
    opts: withoutPath(publishOpts("bare-token", "public:bench.none")),
  };
  // The one-write floor: the same request, and one object call that stores its body as one row.
  const bareWrite1 = { ...barePost, url: `${bare.base}/bare-write1` };
  const scenarios = [
    { id: "bare", title: "bare Hono route (GET, same runtime)", url: `${bare.base}/bare`, pid: bare.pid, opts: {} },
    {
      id: "post",
      title: "bare Hono route, POST with a publish's headers and body (reads it, answers 429)",
      ...barePost,
      reference: true,
    },
    {
      id: "write1",
      title:
        "bare Hono route, POST with a publish's body + 1 Durable Object call that stores it as one row (one-write floor)",
      ...bareWrite1,
      reference: true,
      postShaped: true, // a publish's request: its ratio to the bare POST means something
    },
    {
      id: "rpc2",
      title: "bare Hono route + 2 no-op Durable Object calls (floor for a limited publish)",
      url: `${bare.base}/bare-rpc2`,
      pid: bare.pid,
      opts: {},
      reference: true,
    },
    {
      id: "rpc2w",
      title: "bare Hono route + 2 Durable Object calls that each write one row",
      url: `${bare.base}/bare-rpc2w`,
      pid: bare.pid,
      opts: {},
      reference: true,
    },
    {
      id: "deny",
      title: "deny path (one flooding subject)",
      ...(await publishAs("flood", "public:bench.flood", { rl: "1/h" })),
    },
    ...(fgRead
      ? [
          {
            id: "readdeny",
            title: "deny path of a read flood (anonymous history reads from one IP)",
            url: `${fgRead.base}/v1/history/public:bench.read`,
            pid: fgRead.pid,
            opts: { headers: { "cf-connecting-ip": "198.51.100.7" } },
          },
        ]
      : []),
    {
      id: "pub1",
      title: "publish, throttle 0, limiter on, 1 subscriber",
      subs: subs.one,
      ...(await publishAs("one", "public:bench.one")),
    },
    {
      id: "pub10",
      title: `publish, throttle 0, limiter on, ${RECIPE_SUBSCRIBERS} subscribers`,
      subs: subs.ten,
      ...(await publishAs("ten", "public:bench.ten")),
    },
    ...(recipe
      ? [
          {
            id: "recipe10",
            title: `literal recipe: GCRA limiter object, KV read, 1 channel-object call per message, ${RECIPE_SUBSCRIBERS} subscribers`,
            subs: subs.recipe,
            url: `${recipe.base}/v1/publish/public:bench.recipe`,
            pid: recipe.pid,
            opts: withoutPath(publishOpts("recipe-subject", "public:bench.recipe")),
            reference: true,
            postShaped: true,
          },
        ]
      : []),
    ...(wanted("pusher10")
      ? [
          {
            id: "pusher10",
            title: `Pusher HTTP API event (signed POST /apps/{id}/events), throttle 0, ${RECIPE_SUBSCRIBERS} Pusher connections`,
            subs: subs.pusher,
            ...pusherEvents(fg, PUSHER_BENCH_CHANNEL),
          },
        ]
      : []),
    {
      id: "pub100",
      title: `publish, throttle 0, limiter on, ${SUBSCRIBERS} subscribers`,
      subs: subs.hundred,
      ...(await publishAs("hundred", "public:bench.hundred")),
    },
    {
      id: "pubsse",
      title: `publish, throttle 0, limiter on, ${SUBSCRIBERS} SSE subscribers`,
      subs: subs.sse,
      ...(await publishAs("sse", "public:bench.sse")),
    },
    {
      id: "crowd",
      title: `publish, ${SPREAD} subjects to one channel, 1 subscriber (a few a second each: spare leases at low demand)`,
      subs: subs.crowd,
      warm: () => touchAll(fgMany.base, manyTokens, () => "public:bench.crowd"),
      ...many(fgMany, manyTokens, () => "public:bench.crowd"),
    },
    {
      id: "spread",
      title: `publish, ${SPREAD} subjects each to its own channel (no publish coalescing; spare leases at low demand)`,
      warm: () => touchAll(fgMany.base, manyTokens, (k) => `public:bench.spread${k}`),
      ...many(fgMany, manyTokens, (k) => `public:bench.spread${k}`),
    },
    {
      id: "shard1",
      title:
        "publish into a sharded channel (AUDIENCE_SHARDS by group), throttle 0, limiter on, 1 subscriber in its shard",
      subs: subs.sharded,
      ...(await publishAs("sharded", "public:bench.sharded")),
    },
    ...(wanted("broadcast10")
      ? [
          {
            id: "broadcast10",
            title: `broadcast (Floodgate-Shard: *) into ${BROADCAST_SHARDS} shards, 1 subscriber in one of them`,
            subs: subs.bcast,
            shards: BROADCAST_SHARDS,
            ...broadcast(fg, await broadcastToken(fg), "public:bench.bcast"),
          },
        ]
      : []),
    {
      id: "drop50",
      title: "publish, drop rate 0.5",
      subs: subs.half,
      ...(await publishAs("half", "public:bench.half")),
    },
    {
      id: "drop50sum",
      title: "publish, drop rate 0.5, with a summary rule (each drop counted under its /emoji)",
      subs: subs.halfsum,
      ...(await publishAs("halfsum", "public:bench.halfsum")),
    },
    {
      id: "drop90",
      title: "publish, drop rate 0.9",
      subs: subs.ninety,
      ...(await publishAs("ninety", "public:bench.ninety")),
    },
    {
      id: "flood30k",
      title: `drop flood: 30 KB messages, drop rate 1, ${FLOOD_CONNECTIONS} connections`,
      connections: FLOOD_CONNECTIONS,
      settleCopies: true,
      ...(await publishAs("flood30k", "public:bench.flood30k", { body: FLOOD_BODY })),
    },
  ];

  if (config.only) {
    const keep = new Set(["bare", ...config.only.split(",")]);
    for (let i = scenarios.length - 1; i >= 0; i--) if (!keep.has(scenarios[i].id)) scenarios.splice(i, 1);
  }

  return {
    fg,
    bare,
    scenarios,
    barePost,
    bareWrite1,
    close: async () => {
      for (const s of Object.values(subs)) s.close();
      await fg.stop();
      await fgMany?.stop();
      await fgRead?.stop();
      await recipe?.stop();
    },
  };
}

/**
 * A token that may broadcast on `public:bench.bcast` of `fg`, once its BROADCAST_SHARDS shards exist:
 * the default shard (its subscriber) and groups g1… each with one message of history.
 */
async function broadcastToken(fg) {
  for (let g = 1; g < BROADCAST_SHARDS; g++) {
    const t = await mintToken(fg, { sub: `bcast-g${g}`, channels, rl: generous, group: `g${g}` });
    const { path, ...o } = publishOpts(t, "public:bench.bcast");
    const res = await fetch(fg.base + path, o);
    if (res.status !== 200) throw new Error(`seeding shard g${g} failed: ${res.status}`);
  }
  return mintToken(fg, { sub: "bcast", channels, rl: generous, scopes: ["publish", "broadcast"] });
}

/** Opens `n` SSE subscribers on a channel of the Worker at `base` and counts the events they receive. */
async function sseSubscribers(base, channel, n) {
  const counter = { frames: 0 };
  const controllers = [];
  await Promise.all(
    Array.from({ length: n }, async () => {
      const ctl = new AbortController();
      controllers.push(ctl);
      const res = await fetch(`${base}/v1/subscribe/${channel}`, {
        headers: { accept: "text/event-stream" },
        signal: ctl.signal,
      });
      if (res.status !== 200) throw new Error(`SSE subscribe to ${channel} failed: ${res.status}`);
      const reader = res.body.getReader();
      const decoder = new TextDecoder();
      (async () => {
        for (;;) {
          const { done, value } = await reader.read();
          if (done) break;
          counter.frames += decoder.decode(value, { stream: true }).split("\nevent: message\n").length - 1;
        }
      })().catch(() => {}); // ended by close(), or cut off as a slow reader (fewer deliveries)
    }),
  );
  return {
    counter,
    close: () => {
      for (const ctl of controllers) ctl.abort();
    },
  };
}
