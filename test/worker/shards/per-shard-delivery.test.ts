/**
 * Audience shards (docs/api.md, "Shards"), in workerd with real channel objects, relays, sockets and
 * KV. Rules come from test/vitest.config.ts: `public:sharded.*`, `public:sharded.*.*` and
 * `private:sharded.*.*` by the token's group, `public:geo.*` by continent, and `public:sharded.fast.*`
 * with a 1/s target for the fast loop. Every test uses its own channel names.
 */
import { createExecutionContext, runDurableObjectAlarm, runInDurableObject } from "cloudflare:test";
import { env, exports } from "cloudflare:workers";
import { FloodgateClient, mintTokens } from "@floodgate/client";
import { describe, expect, it } from "vitest";
import { rateKey } from "../../../functions/before-publish";
import { serialiseCopy } from "../../../functions/drop-copies";
import { recordLine } from "../../../functions/record-batch";
import { shardKey, splitShardKey } from "../../../functions/shard-key";
import { UNUSED_CHANNEL_TTL_MS } from "../../../src/channel/idle-expiry";
import { SHARD_REFRESH_MS } from "../../../src/channel/shard-registry";
import worker from "../../../src/index";
import { ConfigError, parseConfig, type RawConfig } from "../../../src/settings/settings";
import { audienceOf, MAX_SHARDS_PER_CHANNEL, parseShardRule } from "../../../src/settings/shards";
import { parseChannelName } from "../../../src/wire/channel-names";
import { frame } from "../../../src/wire/frames";
import { leverOf } from "../../../src/worker/routes/dashboard";
import type { ChannelSample } from "../../../src/worker/sampler/sampler-run";
import { counter, fastRate, setCounters } from "../../support/channel-internals";
import {
  ADMIN,
  adminHeaders,
  BASE,
  call,
  callAndWait,
  envWith,
  type Frame,
  freshIp,
  historyOf,
  mint,
  openSocket,
  publishAndWait,
  storedTables,
  uniq,
  until,
  untilUnsubscribed,
} from "../../support/helpers";

const ANALYTICS = "private:floodgate.analytics.dropped";
const stub = (key: string) => env.CHANNEL.get(env.CHANNEL.idFromName(key));

/** A token with a group (or none) that may publish to and subscribe to `patterns`. */
async function member(patterns: string[], group?: string, scopes?: string[]): Promise<string> {
  const body: Record<string, unknown> = { sub: uniq("m"), channels: patterns, rl: "100000/s" };
  if (group) body.group = group;
  if (scopes) body.scopes = scopes;
  return (await mint(body)).access_token;
}

/** A WebSocket subscriber with a token (or none) and, optionally, a request continent. */
async function socket(channel: string, token: string | null, continent?: string, query = "") {
  const headers: Record<string, string> = { upgrade: "websocket", "cf-connecting-ip": freshIp() };
  if (token) headers.authorization = `Bearer ${token}`;
  const init: RequestInit & { cf?: unknown } = { headers };
  if (continent) init.cf = { continent };
  const res = await worker.fetch(
    new Request(`${BASE}/v1/subscribe/${channel}${query}`, init as RequestInit),
    env,
    createExecutionContext(),
  );
  if (res.status !== 101 || !res.webSocket) throw new Error(`subscribe failed: ${res.status} ${await res.text()}`);
  const ws = res.webSocket;
  const frames: Frame[] = [];
  const raw: string[] = [];
  ws.accept();
  ws.addEventListener("message", (ev) => {
    raw.push(ev.data as string);
    frames.push(JSON.parse(ev.data as string) as Frame);
  });
  return { ws, frames, raw };
}

/** Publishes through the Worker, waiting for its background work; `continent` sets `request.cf`. */
async function pub(
  channel: string,
  token: string,
  data: unknown,
  headers: Record<string, string> = {},
  continent?: string,
): Promise<Response> {
  const init: RequestInit & { cf?: unknown } = {
    method: "POST",
    headers: { authorization: `Bearer ${token}`, "content-type": "application/json", ...headers },
    body: JSON.stringify(data),
  };
  if (continent) init.cf = { continent };
  return callAndWait(`/v1/publish/${channel}`, init as RequestInit);
}

async function statsOf(channel: string): Promise<Record<string, unknown>> {
  const res = await call(`/v1/channels/${channel}/stats`, { headers: adminHeaders() });
  expect(res.status).toBe(200);
  return (await res.json()) as Record<string, unknown>;
}

const payloads = (frames: Frame[]) => frames.map((f) => f.data);

describe("rules and selection", () => {
  const raw: RawConfig = { PUBLISH_RATE: "10/s", SUBSCRIBE_RATE: "10/s", TOKEN_ISSUE_RATE: "10/s", READ_RATE: "10/s" };

  it("parses {by: group | continent} and refuses anything else", () => {
    expect(parseShardRule({ by: "group" })).toEqual({ by: "group" });
    expect(parseShardRule({ by: "continent" })).toEqual({ by: "continent" });
    for (const bad of [{ by: "team" }, { by: "group", x: 1 }, "group", null, [], {}]) {
      expect(() => parseShardRule(bad)).toThrow(/shard rule/);
    }
  });

  it("a bad rule, pattern or JSON is bad configuration naming AUDIENCE_SHARDS", () => {
    for (const text of ['{"public:a.*":{"by":"team"}}', '{"nope":{"by":"group"}}', "{", "[]"]) {
      expect(() => parseConfig({ ...raw, AUDIENCE_SHARDS: text })).toThrow(ConfigError);
      expect(() => parseConfig({ ...raw, AUDIENCE_SHARDS: text })).toThrow(/AUDIENCE_SHARDS/);
    }
  });

  it("fails closed: every route answers 500 naming AUDIENCE_SHARDS", async () => {
    const bad = envWith({ AUDIENCE_SHARDS: '{"public:a.*":{"by":"language"}}' });
    for (const path of ["/healthz", "/v1/manifest", "/v1/history/public:a.b"]) {
      const res = await callAndWait(path, {}, bad);
      expect(res.status).toBe(500);
      expect(await res.text()).toContain("AUDIENCE_SHARDS");
    }
  });

  it("picks the most specific rule, the token's group, the continent, and default", () => {
    const config = parseConfig({
      ...raw,
      AUDIENCE_SHARDS: JSON.stringify({ "public:a.**": { by: "group" }, "public:a.geo": { by: "continent" } }),
    });
    const a = parseChannelName("public:a.chat");
    const geo = parseChannelName("public:a.geo");
    const plain = parseChannelName("public:b.chat");
    const eu = new Request("https://x", { cf: { continent: "EU" } } as RequestInit);
    expect(audienceOf(config, a, { grp: "es" }, null)).toEqual({ shard: "es", key: "public:a.chat#es" });
    expect(audienceOf(config, a, {}, eu)).toEqual({ shard: "default", key: "public:a.chat#default" });
    expect(audienceOf(config, a, null, null)).toEqual({ shard: "default", key: "public:a.chat#default" });
    expect(audienceOf(config, geo, { grp: "es" }, eu)).toEqual({ shard: "EU", key: "public:a.geo#EU" });
    expect(audienceOf(config, geo, null, new Request("https://x"))).toEqual({
      shard: "default",
      key: "public:a.geo#default",
    });
    expect(audienceOf(config, plain, { grp: "es" }, eu)).toEqual({ shard: null, key: "public:b.chat" });
    expect(config.audienceShards.map((r) => r.pattern.source)).toEqual(["public:a.geo", "public:a.**"]);
  });

  it("keys split back into channel and shard; copies and record lines say the shard", () => {
    expect(splitShardKey(shardKey("public:a.b", "es"))).toEqual({ channel: "public:a.b", shard: "es" });
    expect(splitShardKey("public:a.b")).toEqual({ channel: "public:a.b", shard: null });
    const copy = { source_channel: "public:a.b", message: "1", publisher: "p", drop_rate: 1, dropped_at: 5 };
    expect(JSON.parse(serialiseCopy({ ...copy, shard: "es" })).shard).toBe("es");
    expect(serialiseCopy(copy)).not.toContain("shard");
    expect(JSON.parse(recordLine({ ...copy, id: "i", shard: "EU" })).shard).toBe("EU");
    const m = { seq: 1, id: "x", data: "{}", published_at: 2 };
    expect(frame("public:a.b", m)).toBe(
      '{"type":"message","channel":"public:a.b","seq":1,"id":"x","data":{},"published_at":2}',
    );
    expect(frame("public:a.b#es", m)).toBe(
      '{"type":"message","channel":"public:a.b","shard":"es","seq":1,"id":"x","data":{},"published_at":2}',
    );
  });

  it("the manifest lists the rules in selection order", async () => {
    const res = await call("/v1/manifest");
    const body = (await res.json()) as { audience_shards: { pattern: string; by: string }[] };
    expect(body.audience_shards).toEqual([
      { pattern: "private:sharded.*.*", by: "group" },
      { pattern: "public:sharded.*.*", by: "group" },
      { pattern: "public:geo.*", by: "continent" },
      { pattern: "public:sharded.*", by: "group" },
    ]);
  });
});

describe("groups on tokens", () => {
  it("a mint takes a group, signs it as grp, and a refresh keeps it", async () => {
    const pair = await mint({ sub: uniq("g"), channels: ["public:sharded.*"], group: "es" });
    const claims = (t: string) => JSON.parse(atob((t.split(".")[1] ?? "").replace(/-/g, "+").replace(/_/g, "/")));
    expect(claims(pair.access_token).grp).toBe("es");
    const res = await call("/v1/tokens/refresh", {
      method: "POST",
      headers: { "content-type": "application/json", "cf-connecting-ip": freshIp() },
      body: JSON.stringify({ refresh_token: pair.refresh_token }),
    });
    expect(res.status).toBe(200);
    const next = (await res.json()) as { access_token: string; refresh_token: string };
    expect(claims(next.access_token).grp).toBe("es");
    expect(claims(next.refresh_token).grp).toBe("es");
  });

  it("a bad group answers 400 naming it, and broadcast is mintable but never a default", async () => {
    for (const group of ["ES", "", "a".repeat(33), "e s", 7]) {
      const res = await call("/v1/tokens", {
        method: "POST",
        headers: adminHeaders({ "cf-connecting-ip": freshIp() }),
        body: JSON.stringify({ sub: "x", channels: ["public:a.b"], group }),
      });
      expect(res.status).toBe(400);
      expect(((await res.json()) as { msg: string }).msg).toMatch(/group/);
    }
    const claims = (t: string) => JSON.parse(atob((t.split(".")[1] ?? "").replace(/-/g, "+").replace(/_/g, "/")));
    const plain = await mint({ sub: uniq("s"), channels: ["public:a.b"] });
    expect(claims(plain.access_token).scp).toEqual(["publish", "subscribe"]);
    const caster = await mint({ sub: uniq("s"), channels: ["public:a.b"], scopes: ["broadcast"] });
    expect(claims(caster.access_token).scp).toEqual(["broadcast"]);
  });
});

describe("a sharded channel", () => {
  it("delivers each shard's messages to its subscribers only, in order, and every broadcast to all", async () => {
    const ch = `public:sharded.${uniq()}`;
    const es = await member([ch], "es");
    const fr = await member([ch], "fr");
    const anon = await member([ch]);
    const caster = await member([ch], undefined, ["publish", "broadcast"]);
    const subs = { es: await socket(ch, es), fr: await socket(ch, fr), default: await socket(ch, null) };

    const answers: Record<string, unknown>[] = [];
    for (let i = 0; i < 3; i++) {
      for (const [token, who] of [
        [es, "es"],
        [fr, "fr"],
        [anon, "default"],
      ] as const) {
        const res = await pub(ch, token, { who, i });
        expect(res.status).toBe(200);
        answers.push((await res.json()) as Record<string, unknown>);
      }
    }
    expect(answers.slice(0, 3).map((a) => [a.shard, a.seq])).toEqual([
      ["es", 1],
      ["fr", 1],
      ["default", 1],
    ]);
    expect(Object.keys(answers[0] ?? {})).toEqual(["status", "channel", "shard", "seq", "id", "published_at"]);

    const b = await pub(ch, caster, { all: true }, { "floodgate-shard": "*" });
    expect(b.status).toBe(200);
    // Charged once to the publish budget, and its answer says so, like any publish's.
    expect(b.headers.get("ratelimit")).toMatch(/^"publish";r=\d+;t=\d+$/);
    expect(await b.json()).toMatchObject({ status: "delivered", channel: ch, shards: ["default", "es", "fr"] });

    for (const [name, s] of Object.entries(subs)) {
      await until(() => s.frames.length >= 4, `${name}'s frames`);
      expect(payloads(s.frames)).toEqual([
        { who: name, i: 0 },
        { who: name, i: 1 },
        { who: name, i: 2 },
        { all: true },
      ]);
      expect(s.frames.map((f) => f.seq)).toEqual([1, 2, 3, 4]);
      expect(s.frames.every((f) => f.channel === ch && (f as unknown as { shard: string }).shard === name)).toBe(true);
    }
    // One more publish after the broadcast: each subscriber still got nothing of another shard.
    await pub(ch, es, { who: "es", i: 3 });
    await until(() => subs.es.frames.length >= 5, "es's fifth frame");
    expect(subs.fr.frames).toHaveLength(4);
    expect(subs.default.frames).toHaveLength(4);
    for (const s of Object.values(subs)) s.ws.close();
  });

  it("keeps history and resume per shard", async () => {
    const ch = `public:sharded.${uniq()}`;
    const es = await member([ch], "es");
    const fr = await member([ch], "fr");
    for (let i = 0; i < 4; i++) expect((await pub(ch, es, { es: i })).status).toBe(200);
    for (let i = 0; i < 2; i++) expect((await pub(ch, fr, { fr: i })).status).toBe(200);
    expect(payloads(await historyOf(ch, es))).toEqual([{ es: 0 }, { es: 1 }, { es: 2 }, { es: 3 }]);
    expect(payloads(await historyOf(ch, fr, "?after=1"))).toEqual([{ fr: 1 }]);
    expect(await historyOf(ch, null)).toEqual([]); // the default shard has none
    const resumed = await socket(ch, es, undefined, "?after=2");
    await until(() => resumed.frames.length >= 2, "the replay");
    expect(payloads(resumed.frames)).toEqual([{ es: 2 }, { es: 3 }]);
    await pub(ch, es, { es: 4 });
    await pub(ch, fr, { fr: 2 });
    await until(() => resumed.frames.length >= 3, "the live frame");
    expect(payloads(resumed.frames)).toEqual([{ es: 2 }, { es: 3 }, { es: 4 }]);
    expect(resumed.frames.map((f) => f.seq)).toEqual([3, 4, 5]);
    resumed.ws.close();
  });

  it("shards private channels by the subscriber's verified token", async () => {
    const ch = `private:sharded.${uniq()}.room`;
    const es = await member([ch], "es");
    const fr = await member([ch], "fr");
    await pub(ch, es, "hola");
    await pub(ch, fr, "salut");
    expect(payloads(await historyOf(ch, es))).toEqual(["hola"]);
    expect(payloads(await historyOf(ch, fr))).toEqual(["salut"]);
  });

  it("leaves channels no rule matches unchanged, byte for byte", async () => {
    const ch = `public:plain.${uniq()}`;
    const tok = await member([ch], "es", ["publish", "broadcast"]);
    const s = await openSocket(ch);
    const res = await publishAndWait(ch, tok, { a: 1 });
    const body = (await res.json()) as Record<string, unknown>;
    expect(Object.keys(body)).toEqual(["status", "channel", "seq", "id", "published_at"]);
    const [f] = await s.next(1);
    expect(f).toEqual({
      type: "message",
      channel: ch,
      seq: 1,
      id: body.id,
      data: { a: 1 },
      published_at: body.published_at,
    });
    // The shard header on a channel no rule shards is a bad request.
    expect((await publishAndWait(ch, tok, 1, { "floodgate-shard": "*" })).status).toBe(400);
    s.ws.close();
  });
});

describe("broadcast and Floodgate-Shard", () => {
  it("needs the broadcast scope (403), a shard name (400), and publishes into one named shard", async () => {
    const ch = `public:sharded.${uniq()}`;
    const plain = await member([ch], "es");
    const caster = await member([ch], "es", ["publish", "broadcast"]);
    for (const h of ["*", "fr"]) {
      const res = await pub(ch, plain, 1, { "floodgate-shard": h });
      expect(res.status).toBe(403);
      expect(await res.json()).toMatchObject({ code: "permission_denied", meta: { code: "PERMISSION_DENIED" } });
    }
    for (const h of ["FR", "", "a b", "x".repeat(33)]) {
      const res = await pub(ch, caster, 1, { "floodgate-shard": h });
      expect(res.status).toBe(400);
      expect(((await res.json()) as { msg: string }).msg).toMatch(/Floodgate-Shard/);
    }
    const fr = await member([ch], "fr");
    const res = await pub(ch, caster, "to fr", { "floodgate-shard": "fr" });
    expect(res.status).toBe(200);
    expect(await res.json()).toMatchObject({ shard: "fr", seq: 1 });
    expect(payloads(await historyOf(ch, fr))).toEqual(["to fr"]);
    expect(await historyOf(ch, plain)).toEqual([]);
    // Nothing refused changed anything: no shard holds any other message.
    expect((await statsOf(ch)).delivered_total).toBe(1);
  });

  it("reaches only shards with subscribers or history, and is never dropped by the throttle", async () => {
    const ch = `public:sharded.${uniq()}`;
    const es = await member([ch], "es");
    const caster = await member([ch], undefined, ["publish", "broadcast"]);
    const none = await pub(ch, caster, "nobody", { "floodgate-shard": "*" });
    expect(await none.json()).toMatchObject({ shards: [] });
    const listener = await socket(ch, null); // the default shard: a subscriber, no history
    await pub(ch, es, "first"); // es: history
    // Every shard drops everything: a broadcast still goes through.
    const put = await call(`/v1/admin/throttle/${ch}`, {
      method: "PUT",
      headers: adminHeaders(),
      body: JSON.stringify({ rate: 1 }),
    });
    expect(put.status).toBe(200);
    expect((await pub(ch, es, "dropped")).status).toBe(202);
    const res = await pub(ch, caster, "to all", { "floodgate-shard": "*" });
    expect(res.status).toBe(200);
    expect(await res.json()).toMatchObject({ status: "delivered", shards: ["default", "es"] });
    expect(payloads(await historyOf(ch, es))).toEqual(["first", "to all"]);
    await until(() => listener.frames.length >= 1, "the broadcast on the default shard");
    expect(payloads(listener.frames)).toEqual(["to all"]);
    listener.ws.close();
  });

  it("bounds a channel's registry: past the bound a new shard answers 503", async () => {
    const ch = `public:sharded.${uniq()}`;
    const registry = stub(ch);
    for (let i = 0; i < MAX_SHARDS_PER_CHANNEL; i++)
      expect(await registry.registerShard(ch, `g${i}`, Date.now())).toBe(true);
    expect(await registry.registerShard(ch, "one-more", Date.now())).toBe(false);
    const late = await member([ch], "one-more");
    expect((await pub(ch, late, 1)).status).toBe(503);
    const listed = await member([ch], "g3");
    expect((await pub(ch, listed, 1)).status).toBe(200);
    expect(await stub(shardKey(ch, "one-more")).history(null, 10)).toEqual([]);
    // A broadcast reaches the one listed shard with history and forgets the listed ones with nothing.
    const caster = await member([ch], undefined, ["publish", "broadcast"]);
    const res = await pub(ch, caster, "all", { "floodgate-shard": "*" });
    expect(await res.json()).toMatchObject({ shards: ["g3"] });
    expect(await registry.shardNames()).toEqual(["g3"]);
    for (const g of ["g0", "g4"]) expect(await storedTables(stub(shardKey(ch, g)))).toEqual({});
  });
});

describe("per-shard throttle, stats and the record", () => {
  it("stats answer totals and each shard; ?shard= sets one shard's rate", async () => {
    const ch = `public:sharded.${uniq()}`;
    const es = await member([ch], "es");
    const fr = await member([ch], "fr");
    const s = await socket(ch, es);
    for (let i = 0; i < 3; i++) await pub(ch, es, i);
    await pub(ch, fr, "x");
    const put = await call(`/v1/admin/throttle/${ch}?shard=fr`, {
      method: "PUT",
      headers: adminHeaders(),
      body: JSON.stringify({ rate: 1 }),
    });
    expect(put.status).toBe(200);
    expect(await put.json()).toMatchObject({ channel: ch, shard: "fr", rate: 1 });
    expect(await env.THROTTLE_KV.get(rateKey(shardKey(ch, "fr")))).toBe("1");
    expect(await env.THROTTLE_KV.get(rateKey(shardKey(ch, "es")))).toBeNull();
    expect((await pub(ch, fr, "y")).status).toBe(202);
    expect((await pub(ch, es, 3)).status).toBe(200);
    await until(() => s.frames.length >= 4, "es's frames");
    const stats = await statsOf(ch);
    expect(stats).toMatchObject({
      channel: ch,
      occupancy: 1,
      delivered_total: 5,
      dropped_total: 1,
      shard_rule: { pattern: "public:sharded.*", by: "group" },
      shards: {
        es: { occupancy: 1, delivered_total: 4, dropped_total: 0, drop_rate: 0 },
        fr: { occupancy: 0, delivered_total: 1, dropped_total: 1, drop_rate: 1 },
      },
    });
    for (const [q, status] of [
      ["?shard=FR", 400],
      ["?shard=", 400],
    ] as const) {
      const res = await call(`/v1/admin/throttle/${ch}${q}`, { headers: adminHeaders() });
      expect(res.status).toBe(status);
    }
    const unsharded = await call(`/v1/admin/throttle/public:plain.${uniq()}?shard=es`, { headers: adminHeaders() });
    expect(unsharded.status).toBe(400);
    s.ws.close();
  });

  it("the record of a dropped message says which shard", async () => {
    const ch = `public:sharded.${uniq()}`;
    const es = await member([ch], "es");
    const reader = await member([ANALYTICS], undefined, ["subscribe"]);
    await call(`/v1/admin/throttle/${ch}?shard=es`, {
      method: "PUT",
      headers: adminHeaders(),
      body: JSON.stringify({ rate: 1 }),
    });
    expect((await pub(ch, es, { lost: 1 })).status).toBe(202);
    const mine = async () =>
      (await historyOf(ANALYTICS, reader, "?limit=1000"))
        .map((f) => f.data as Record<string, unknown>)
        .filter((d) => d.source_channel === ch);
    await until(async () => (await mine()).length > 0, "the copy on the analytics channel");
    expect(await mine()).toMatchObject([{ source_channel: ch, shard: "es", message: { lost: 1 }, drop_rate: 1 }]);
    // Counted on the shard it was dropped in.
    await until(async () => {
      const shards = (await statsOf(ch)).shards as Record<string, { dropped_total: number }> | undefined;
      return shards?.es?.dropped_total === 1;
    }, "the drop counted on es");
  });

  it("the fast loop holds each shard's target on its own", async () => {
    const ch = `public:sharded.fast.${uniq()}`;
    const busy = await member([ch], "busy");
    const quiet = await member([ch], "quiet");
    // A period of 30 s at the 1/s target allows 30 messages: `busy` offers 4×, `quiet` a third.
    for (let i = 0; i < 120; i++) expect([200, 202]).toContain((await pub(ch, busy, i)).status);
    for (let i = 0; i < 10; i++) expect((await pub(ch, quiet, i)).status).toBe(200);
    for (const g of ["busy", "quiet"]) {
      const key = shardKey(ch, g);
      await runInDurableObject(stub(key), (instance) => {
        expect(counter(instance, "fast_due_at")).toBeGreaterThan(0);
        const now = Date.now();
        setCounters(instance, { fast_started_at: now - 30_000, fast_due_at: now });
      });
      await runDurableObjectAlarm(stub(key));
    }
    const busyRate = await runInDurableObject(stub(shardKey(ch, "busy")), fastRate);
    const quietRate = await runInDurableObject(stub(shardKey(ch, "quiet")), fastRate);
    expect(busyRate).toBeGreaterThan(0.6);
    expect(busyRate).toBeLessThan(0.85);
    expect(quietRate).toBe(0);
    // The Worker hears each shard's own rate with its next answer: the quiet shard's publishes all go through.
    for (let i = 0; i < 5; i++) expect((await pub(ch, quiet, i)).status).toBe(200);
    for (let i = 0; i < 5; i++) expect([200, 202]).toContain((await pub(ch, busy, i)).status);
    const stats = await statsOf(ch);
    const shards = stats.shards as Record<string, { drop_rate: number }>;
    expect(shards.quiet?.drop_rate).toBe(0);
    expect(shards.busy?.drop_rate).toBeGreaterThan(0.6);
  });
});

describe("continent shards", () => {
  it("shard by the request's continent, default without one", async () => {
    const ch = `public:geo.${uniq()}`;
    const tok = await member([ch], "es");
    const eu = await socket(ch, null, "EU");
    const na = await socket(ch, tok, "NA");
    const local = await socket(ch, null);
    expect(await (await pub(ch, tok, "eu", {}, "EU")).json()).toMatchObject({ shard: "EU", seq: 1 });
    expect(await (await pub(ch, tok, "na", {}, "NA")).json()).toMatchObject({ shard: "NA", seq: 1 });
    expect(await (await pub(ch, tok, "here")).json()).toMatchObject({ shard: "default", seq: 1 });
    await until(() => eu.frames.length + na.frames.length + local.frames.length >= 3, "three frames");
    expect(payloads(eu.frames)).toEqual(["eu"]);
    expect(payloads(na.frames)).toEqual(["na"]);
    expect(payloads(local.frames)).toEqual(["here"]);
    expect((eu.frames[0] as unknown as { shard: string }).shard).toBe("EU");
    for (const s of [eu, na, local]) s.ws.close();
    // The relays' leave reports land before the file ends (a pending call at teardown fails the run).
    await until(async () => (await statsOf(ch)).occupancy === 0, "every subscriber gone");
  });
});

describe("the TypeScript client", () => {
  it("mints with a group, publishes into a named shard and sees `shard` on messages", async () => {
    const ch = `public:sharded.${uniq()}`;
    const workerFetch = (input: string, init?: RequestInit) =>
      exports.default.fetch(
        new Request(input, { ...init, headers: { ...(init?.headers as object), "cf-connecting-ip": freshIp() } }),
      );
    const admin = { baseUrl: BASE, adminToken: ADMIN, fetch: workerFetch };
    const pair = await mintTokens(admin, {
      sub: uniq("c"),
      channels: [ch],
      group: "es",
      scopes: ["publish", "subscribe", "broadcast"],
    });
    const fg = new FloodgateClient({ baseUrl: BASE, accessToken: pair.access_token, fetch: workerFetch });
    const own = await fg.publish(ch, "mine");
    expect(own).toMatchObject({ status: "delivered", shard: "es", seq: 1 });
    expect(await fg.publish(ch, "theirs", { shard: "fr" })).toMatchObject({ shard: "fr", seq: 1 });
    expect(await fg.publish(ch, "all", { shard: "*" })).toMatchObject({ shards: ["es", "fr"] });
    const bad = mintTokens(admin, { sub: "x", channels: [ch], group: "NO" });
    await expect(bad).rejects.toMatchObject({ status: 400 });
    const got = await historyOf(ch, pair.access_token);
    expect(got.map((m) => [m.shard, m.data])).toEqual([
      ["es", "mine"],
      ["es", "all"],
    ]);
  });
});

describe("the dashboard's overview", () => {
  it("shows a sharded channel as one card with its shards, each with its lever", async () => {
    const ch = `public:sharded.${uniq()}`;
    await pub(ch, await member([ch], "es"), 1);
    await pub(ch, await member([ch], "fr"), 2);
    const res = await call("/v1/admin/overview", { headers: adminHeaders() });
    expect(res.status).toBe(200);
    const { channels } = (await res.json()) as { channels: Record<string, unknown>[] };
    const mine = channels.filter((c) => c.channel === ch);
    expect(mine).toHaveLength(1);
    const card = mine[0] as { sharding: unknown; shards: { shard: string; lever: { points_to: string } }[] };
    expect(card.sharding).toEqual({ pattern: "public:sharded.*", by: "group" });
    expect(card.shards.map((s) => s.shard)).toEqual(["es", "fr"]);
    for (const s of card.shards) expect(s.lever.points_to).toBe("none");
  });

  it("points frequency to the throttle and occupancy to a shard, the one further past its mark", () => {
    const entry = (rate: number | null, occupancy: number | null, target: number | null) => ({
      channel: "public:a.b",
      last_seen_at: 0,
      occupancy,
      target_rate: target,
      last_sample: rate === null ? null : ({ offered_rate: rate } as unknown as ChannelSample),
    });
    expect(leverOf(entry(5, 10, null), null).points_to).toBe("none");
    expect(leverOf(entry(50, 10, null), null).points_to).toBe("throttle");
    expect(leverOf(entry(50, 10, 100), null).points_to).toBe("none");
    const crowd = leverOf(entry(5, 5000, null), null);
    expect(crowd.points_to).toBe("shard");
    expect(crowd.rule).toContain("if a grouping exists");
    expect(leverOf(entry(5, 5000, null), { pattern: "public:a.*", by: "group" }).rule).toContain("public:a.*");
    // Both past their marks: 30/s is 3× its 10/s, 5,000 subscribers 5× their 1,000.
    expect(leverOf(entry(30, 5000, null), null).points_to).toBe("shard");
    expect(leverOf(entry(80, 5000, null), null).points_to).toBe("throttle");
  });
});

describe("the shard registry's storage", () => {
  const HISTORY_TTL_MS = 7 * 24 * 3600_000; // the shipped HISTORY_TTL
  /** Moves a channel object's idle clock (last publish and last shard report) to `at`. */
  const idleSince = (key: string, at: number) =>
    runInDurableObject(stub(key), (instance) => setCounters(instance, { last_publish_at: at, shards_seen_at: at }));

  it("outlives every shard's history, then goes with idle expiry", async () => {
    const ch = `public:sharded.${uniq()}`;
    const base = stub(ch);
    expect(await base.registerShard(ch, "es", Date.now())).toBe(true);
    // Not a made-up name's minute, nor HISTORY_TTL alone: a shard keeps history that long after its last publish.
    for (const ago of [UNUSED_CHANNEL_TTL_MS + 1, HISTORY_TTL_MS + 1]) {
      await idleSince(ch, Date.now() - ago);
      expect(await runDurableObjectAlarm(base)).toBe(true); // the alarm ran
      expect(await base.shardNames()).toEqual(["es"]);
    }
    await idleSince(ch, Date.now() - HISTORY_TTL_MS - SHARD_REFRESH_MS - 1);
    await runDurableObjectAlarm(base);
    expect(await base.shardNames()).toEqual([]);
    expect(await storedTables(base)).toEqual({});
  });

  it("forgets a shard that deleted itself as idle", async () => {
    const ch = `public:sharded.${uniq()}`;
    const es = await member([ch], "es");
    const fr = await member([ch], "fr");
    await pub(ch, es, 1);
    await pub(ch, fr, 1);
    expect(await stub(ch).shardNames()).toEqual(["es", "fr"]);
    const key = shardKey(ch, "es");
    await runInDurableObject(stub(key), (instance) =>
      setCounters(instance, { last_publish_at: Date.now() - HISTORY_TTL_MS - 1 }),
    );
    await runDurableObjectAlarm(stub(key));
    expect(await storedTables(stub(key))).toEqual({});
    await until(async () => (await stub(ch).shardNames()).length === 1, "es leaving the registry");
    expect(await stub(ch).shardNames()).toEqual(["fr"]);
  });
});

describe("presence on a sharded channel", () => {
  it("answers the caller's shard, names it, and its presence frames carry the shard", async () => {
    const ch = `public:sharded.${uniq()}`;
    const es = await member(["public:sharded.*"], "es");
    const fr = await member(["public:sharded.*"], "fr");
    const a = await socket(ch, es, undefined, "?presence=1");
    const b = await socket(ch, es);
    const c = await socket(ch, fr);
    // The state frame of `a`'s own shard: itself, then `b` joins the same shard; `c` is in another.
    await until(() => a.frames.some((f) => (f as { action?: string }).action === "state"), "a's state frame");
    const state = a.frames.find((f) => (f as { action?: string }).action === "state") as unknown as Record<
      string,
      unknown
    >;
    expect(state).toMatchObject({ type: "presence", channel: ch, shard: "es" });
    const presenceOf = async (token: string) => {
      const res = await call(`/v1/presence/${ch}`, {
        headers: { authorization: `Bearer ${token}`, "cf-connecting-ip": freshIp() },
      });
      expect(res.status).toBe(200);
      return (await res.json()) as { channel: string; shard?: string; occupancy: number };
    };
    await until(async () => (await presenceOf(es)).occupancy === 2, "two in the es shard");
    expect(await presenceOf(es)).toMatchObject({ channel: ch, shard: "es", occupancy: 2 });
    expect(await presenceOf(fr)).toMatchObject({ channel: ch, shard: "fr", occupancy: 1 });
    for (const f of a.frames) if ((f as { type: string }).type === "presence") expect(f).toMatchObject({ shard: "es" });
    for (const s of [a, b, c]) s.ws.close();
    await untilUnsubscribed(ch);
  });
});
