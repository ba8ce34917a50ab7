/**
 * Which shard a request belongs to (docs/api.md, "Shards"): AUDIENCE_SHARDS rules (bad ones fail
 * closed), the most specific rule, the token's group (minted, signed, kept on refresh) or the
 * request's continent, else `default`. Rules come from test/vitest.config.ts.
 */
import { describe, expect, it } from "vitest";
import { serialiseCopy } from "../../../functions/drop-copies";
import { recordLine } from "../../../functions/record-batch";
import { shardKey, splitShardKey } from "../../../functions/shard-key";
import { ConfigError, parseConfig, type RawConfig } from "../../../src/settings/settings";
import { parseShardRule } from "../../../src/settings/shards";
import { parseChannelName } from "../../../src/wire/channel-names";
import { frame } from "../../../src/wire/frame-text";
import { audienceOf } from "../../../src/worker/shards/audience";
import { member, payloads, pub, socket, statsOf } from "../../support/audience-shards";
import { adminHeaders, call, callAndWait, envWith, freshIp, mint, uniq, until } from "../../support/helpers";

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
    expect(frame("public:a.b", "E1", m)).toBe(
      '{"type":"message","channel":"public:a.b","epoch":"E1","seq":1,"id":"x","data":{},"published_at":2}',
    );
    expect(frame("public:a.b#es", "E2", m)).toBe(
      '{"type":"message","channel":"public:a.b","shard":"es","epoch":"E2","seq":1,"id":"x","data":{},"published_at":2}',
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
