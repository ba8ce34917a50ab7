/**
 * Audience shards deliver per shard (docs/api.md, "Shards"), in workerd with real channel objects,
 * relays and sockets: each shard's messages reach its subscribers only, history, resume and presence
 * are per shard, private channels are sharded by the verified token, and the TypeScript client sees
 * `shard`. Rules come from test/vitest.config.ts; every test uses its own channel names.
 */
import { exports } from "cloudflare:workers";
import { FloodgateClient, mintTokens } from "@floodgate/client";
import { describe, expect, it } from "vitest";
import { member, payloads, pub, socket } from "../../support/audience-shards";
import {
  ADMIN,
  BASE,
  call,
  freshIp,
  historyOf,
  openSocket,
  publishAndWait,
  uniq,
  until,
  untilUnsubscribed,
} from "../../support/helpers";

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
    expect(Object.keys(answers[0] ?? {})).toEqual(["status", "channel", "shard", "epoch", "seq", "id", "published_at"]);

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

  it("leaves channels no rule matches unsharded: no shard in the answer or the frame", async () => {
    const ch = `public:plain.${uniq()}`;
    const tok = await member([ch], "es", ["publish", "broadcast"]);
    const s = await openSocket(ch);
    const res = await publishAndWait(ch, tok, { a: 1 });
    const body = (await res.json()) as Record<string, unknown>;
    expect(Object.keys(body)).toEqual(["status", "channel", "epoch", "seq", "id", "published_at"]);
    const [f] = await s.next(1);
    expect(f).toEqual({
      type: "message",
      channel: ch,
      epoch: body.epoch,
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
