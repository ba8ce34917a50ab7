/**
 * The Pusher HTTP API's counts of a channel that a continent rule shards (docs/api.md, "The Pusher
 * door" and "Shards"), as the `pusher` server library asks them: the app's server sits in one region
 * (here Miniflare's placeholder continent, `NA`) while its users are in others, and every answer is the
 * whole channel's — `occupied`, `subscription_count`, `user_count` (a user present in two shards
 * counts once), `/users` — in the one-channel route and in `info` of `trigger` and `triggerBatch`; the
 * listing names the channel once with its shards' members added up.
 *
 * A Floodgate of its own through Miniflare's entry Worker, which sets a request's `cf` from an
 * `MF-CF-Blob` header, and in front of it a stand-in for Cloudflare's edge that gives each pusher-js
 * connection the continent its path names (./edge.ts).
 */
import Pusher from "pusher";
import PusherJS from "pusher-js";
import { afterAll, afterEach, beforeAll, describe, expect, it } from "vitest";
import { edgeInFrontOf, headerInPath } from "./edge";
import { backendAuthorization, subscribed, uniq, until } from "./floodgate";
import { PUSHER, pusherFloodgate } from "./global-setup";

let worker: { base: string; stop(): Promise<void> };
let edge: { port: number; stop(): void };

beforeAll(async () => {
  worker = await pusherFloodgate(
    {
      AUDIENCE_SHARDS: JSON.stringify({
        "pusher:geo.*": { by: "continent" },
        "pusher:presence-geo.*": { by: "continent" },
      }),
      // Every connection of this file comes from this machine, one client.
      MAX_CONNECTIONS_PER_CLIENT: "1000",
    },
    { viaEntry: true },
  );
  // `/cf/<JSON>/app/…` is a connection whose request carries that `cf` (its continent).
  edge = await edgeInFrontOf(new URL(worker.base), headerInPath("cf", "MF-CF-Blob"));
});
afterAll(async () => {
  edge?.stop();
  await worker?.stop();
});

const clients: PusherJS[] = [];
afterEach(() => {
  for (const c of clients.splice(0)) c.disconnect();
});

/** pusher-js connecting from `continent`, a presence member `user` where a channel asks for one. */
function from(continent: string, user = "anyone"): PusherJS {
  const c = new PusherJS(PUSHER.key, {
    cluster: "local",
    wsHost: "127.0.0.1",
    wsPort: edge.port,
    wsPath: `/cf/${encodeURIComponent(JSON.stringify({ continent }))}`,
    forceTLS: false,
    enabledTransports: ["ws"],
    disableStats: true,
    channelAuthorization: backendAuthorization(() => ({ user_id: user })),
  });
  clients.push(c);
  return c;
}

/** The app's server: the `pusher` library, its requests from no continent of the subscribers' (NA). */
function backend(): Pusher {
  const url = new URL(worker.base);
  return new Pusher({ ...PUSHER, host: url.hostname, port: url.port, useTLS: false });
}

async function json(res: Promise<{ json(): Promise<unknown> }>): Promise<unknown> {
  return await (await res).json();
}

/** `GET /apps/{id}/channels/{name}` with `info`, once it answers `want` (counts land as hosts report). */
async function channelOnceItIs(name: string, info: string, want: unknown): Promise<unknown> {
  let last: unknown;
  await until(
    async () => {
      last = await json(backend().get({ path: `/channels/${name}`, params: { info } }));
      return JSON.stringify(last) === JSON.stringify(want);
    },
    `${name} to answer ${JSON.stringify(want)}`,
    5000,
  ).catch(() => undefined);
  return last;
}

describe("a continent-sharded Pusher channel, asked by the pusher server library from another continent", () => {
  it("occupied and subscription_count cover every shard, in the channel route and trigger's info", async () => {
    const name = `geo.${uniq()}`;
    await subscribed(from("EU"), name);
    await subscribed(from("EU"), name);
    await subscribed(from("AS"), name);
    expect(await channelOnceItIs(name, "subscription_count", { occupied: true, subscription_count: 3 })).toEqual({
      occupied: true,
      subscription_count: 3,
    });
    const api = backend();
    const triggered = (await json(api.trigger(name, "e", { n: 1 }, { info: "subscription_count" }))) as {
      channels?: unknown;
    };
    expect(triggered.channels).toEqual({ [name]: { subscription_count: 3 } });
    const batch = (await json(
      api.triggerBatch([{ channel: name, name: "e", data: "x", info: "subscription_count" }]),
    )) as { batch?: unknown };
    expect(batch.batch).toEqual([{ subscription_count: 3 }]);
    const listed = (await json(api.get({ path: "/channels", params: { filter_by_prefix: "geo." } }))) as {
      channels: Record<string, unknown>;
    };
    expect(listed.channels[name]).toEqual({});
    for (const c of clients.splice(0)) c.disconnect();
    expect(await channelOnceItIs(name, "subscription_count", { occupied: false, subscription_count: 0 })).toEqual({
      occupied: false,
      subscription_count: 0,
    });
  });

  it("user_count and /users: a user present in two shards counts once; the listing adds up each shard's members", async () => {
    const name = `presence-geo.${uniq()}`;
    await subscribed(from("EU", "ann"), name);
    await subscribed(from("EU", "bob"), name);
    await subscribed(from("AS", "ann"), name);
    await subscribed(from("AS", "cy"), name);
    const want = { occupied: true, subscription_count: 4, user_count: 3 };
    expect(await channelOnceItIs(name, "subscription_count,user_count", want)).toEqual(want);
    const api = backend();
    const users = (await json(api.get({ path: `/channels/${name}/users` }))) as { users: { id: string }[] };
    expect(users.users.map((u) => u.id).sort()).toEqual(["ann", "bob", "cy"]);
    const triggered = (await json(api.trigger(name, "e", "x", { info: "user_count,subscription_count" }))) as {
      channels?: unknown;
    };
    expect(triggered.channels).toEqual({ [name]: { subscription_count: 4, user_count: 3 } });
    const batch = (await json(api.triggerBatch([{ channel: name, name: "e", data: "x", info: "user_count" }]))) as {
      batch?: unknown;
    };
    expect(batch.batch).toEqual([{ user_count: 3 }]);
    // The listing answers from the list of occupied channels, each shard's member count beside its
    // name: it adds them up (ann is in two shards), never asks the shards for their members.
    let listed: Record<string, unknown> = {};
    await until(async () => {
      const res = (await json(
        api.get({ path: "/channels", params: { filter_by_prefix: "presence-geo.", info: "user_count" } }),
      )) as { channels: Record<string, unknown> };
      listed = res.channels;
      return JSON.stringify(listed[name]) === JSON.stringify({ user_count: 4 });
    }, "the listing's members").catch(() => undefined);
    expect(listed[name]).toEqual({ user_count: 4 });
  });
});
