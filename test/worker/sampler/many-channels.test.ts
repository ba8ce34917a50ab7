/**
 * A flood of distinct channel names (docs/security.md, "Storage bounded by activity"; docs/operations.md,
 * "Sampler limits per run"): one sampler run visits at most SAMPLER_MAX_CHANNELS, busiest first, and
 * writes KV only for rates that change; every flooded channel's storage is reclaimed by its alarm.
 * Own file: the sampler's registry is shared by the tests of a file, and these fill it on purpose.
 */
import { runDurableObjectAlarm, runInDurableObject } from "cloudflare:test";
import { env } from "cloudflare:workers";
import { describe, expect, it } from "vitest";
import { rateKey } from "../../../functions/before-publish";
import { activeChannelsStub, channelStub } from "../../../src/platform/stubs";
import { settingsOf } from "../../../src/settings/settings";
import type { SamplerReport } from "../../../src/worker/sampler/sampler-run";
import { backdatePeriod, counter, setCounters } from "../../support/channel-internals";
import { adminHeaders, callAndWait, envWith, mint, publishTo, uniq } from "../../support/helpers";

/** Flooded names that get a real object each (see the flood test). */
const REAL_CHANNELS = 50;
const stubOf = (name: string) => channelStub(env, name);

async function sample(customEnv: Env = env): Promise<SamplerReport> {
  const res = await callAndWait("/v1/admin/sample", { method: "POST", headers: adminHeaders() }, customEnv);
  expect(res.status).toBe(200);
  return (await res.json()) as SamplerReport;
}

/** Publishes `n` messages to each channel, `width` requests at a time. */
async function flood(channels: string[], token: string, n = 1, width = 64): Promise<void> {
  const jobs = channels.flatMap((ch) => Array.from({ length: n }, () => ch));
  for (let i = 0; i < jobs.length; i += width) {
    const answers = await Promise.all(jobs.slice(i, i + width).map((ch) => publishTo(ch, token, 1)));
    for (const r of answers) expect(r.status).toBe(200);
  }
}

const visited = (r: SamplerReport) => r.channels.map((c) => c.channel).sort();

/** Starts the channels' current periods a minute ago: their few messages are then far under target. */
async function backdatePeriods(channels: string[]): Promise<void> {
  for (const ch of channels) {
    await backdatePeriod(ch, 60_000);
  }
}

describe("the sampler under many channels", () => {
  it("never writes KV for a new channel whose rate does not change", async () => {
    const t = (await mint({ sub: uniq("pub"), channels: ["public:sampled.**"], rl: "100000/s" })).access_token;
    const ch = `public:sampled.quiet.${uniq()}`;
    await flood([ch], t, 3);
    await backdatePeriods([ch]);
    const report = await sample();
    expect(report.channels.find((c) => c.channel === ch)).toMatchObject({ written: false, new_rate: 0 });
    expect(await env.THROTTLE_KV.get(rateKey(ch))).toBeNull();
  });

  it("a new channel under its target gets its own 0 when the global rate would throttle it", async () => {
    const t = (await mint({ sub: uniq("pub"), channels: ["public:sampled.**"], rl: "100000/s" })).access_token;
    const ch = `public:sampled.global.${uniq()}`;
    await flood([ch], t, 3);
    await backdatePeriods([ch]);
    await env.THROTTLE_KV.put("throttleRate", "0.5");
    try {
      const report = await sample();
      expect(report.channels.find((c) => c.channel === ch)).toMatchObject({ written: true, new_rate: 0 });
      expect(await env.THROTTLE_KV.get(rateKey(ch))).toBe("0");
    } finally {
      await env.THROTTLE_KV.delete("throttleRate");
    }
  });

  it("visits at most SAMPLER_MAX_CHANNELS per run, busiest first; the rest keep their marks for the next run", async () => {
    const t = (await mint({ sub: uniq("pub"), channels: ["public:sampled.**"], rl: "100000/s" })).access_token;
    const [quiet, busy, busier] = ["quiet", "busy", "busier"].map((n) => `public:sampled.order.${uniq(n)}`) as [
      string,
      string,
      string,
    ];
    await flood([quiet], t, 1);
    await flood([busy], t, 12);
    await flood([busier], t, 120);
    await backdatePeriods([quiet, busy, busier]);
    const capped = envWith({ SAMPLER_MAX_CHANNELS: "2" });
    const first = await sample(capped);
    expect(visited(first)).toEqual([busier, busy].sort());
    expect(first.deferred).toBe(1);
    // Only this test's channels: marks other tests leave (in whatever order they ran) are not its business.
    const mine = (active: string[]) => active.filter((ch) => [quiet, busy, busier].includes(ch));
    expect(mine((await activeChannelsStub(env).snapshot()).active)).toEqual([quiet]);
    const second = await sample(capped);
    expect(visited(second)).toEqual([quiet]);
    expect(second.deferred).toBe(0);
  });

  it("5,000 new channel names: one run visits SAMPLER_MAX_CHANNELS of them, busiest first, and writes no KV; every flooded object's storage is reclaimed", async () => {
    const t = (await mint({ sub: uniq("pub"), channels: ["public:sampled.**"], rl: "100000/s" })).access_token;
    const run = uniq("f");
    const names = Array.from({ length: 5000 }, (_, i) => `public:sampled.${run}.c${i}`);
    // The first REAL_CHANNELS names get a real publish each: a real object that marks itself in the
    // registry. The others get only the mark such an object makes (the registry's own markActive,
    // called inside it): creating an object costs 10–70 ms in the test runtime, 5,000 minutes.
    const real = names.slice(0, REAL_CHANNELS);
    await flood(real, t);
    await runInDurableObject(activeChannelsStub(env), (registry) => {
      for (const ch of names.slice(REAL_CHANNELS)) registry.markActive(ch);
    });
    // And one busy channel marked last: the run visits it although 5,000 older marks wait.
    const busy = `public:sampled.${run}.busy`;
    await flood([busy], t, 12);
    const marked = new Set((await activeChannelsStub(env).snapshot()).active);
    expect([...names, busy].every((ch) => marked.has(ch))).toBe(true);
    try {
      await checkTheRun();
    } finally {
      // The 4,951 marks the capped run left, and the busy channel it left throttled, would make every
      // later sampler run of this file visit them first (the tests run in any order): take them out
      // of the shared registry again.
      await runInDurableObject(activeChannelsStub(env), (_r, state) => {
        for (const table of ["active", "throttled"]) {
          state.storage.sql.exec(`DELETE FROM ${table} WHERE channel LIKE ?`, `public:sampled.${run}.%`);
        }
      });
    }

    async function checkTheRun(): Promise<void> {
      // Shipped at 500 (docs/operations.md); a run here is capped at REAL_CHANNELS to stay fast.
      expect(settingsOf(env).samplerMaxChannels).toBe(500);
      const report = await sample(envWith({ SAMPLER_MAX_CHANNELS: String(REAL_CHANNELS) }));
      expect(report.channels).toHaveLength(REAL_CHANNELS);
      expect(report.deferred).toBe(names.length + 1 - REAL_CHANNELS);
      expect(report.channels.map((c) => c.channel)).toContain(busy);
      // Nothing changed, so nothing was written to KV (one write would be one KV operation per channel).
      expect(report.channels.filter((c) => c.channel !== busy).every((c) => "written" in c && !c.written)).toBe(true);
      expect((await env.THROTTLE_KV.list({ prefix: rateKey(`public:sampled.${run}.c`) })).keys).toEqual([]);

      // HISTORY_TTL later (the stored time moved back, in storage and in the instance's copy), every
      // flooded object deletes everything it stored.
      const weekAndMore = 7 * 24 * 3600 * 1000 + 1000;
      await Promise.all(
        [...real, busy].map(async (ch) => {
          const stub = stubOf(ch);
          await runInDurableObject(stub, (o) => {
            setCounters(o, { last_publish_at: counter(o, "last_publish_at") - weekAndMore });
          });
          expect(await runDurableObjectAlarm(stub)).toBe(true);
          const tables = await runInDurableObject(stub, (_o, state) => ({
            tables: state.storage.sql.exec("SELECT COUNT(*) AS n FROM sqlite_master WHERE type = 'table'").one().n,
          }));
          expect(tables).toEqual({ tables: 0 });
        }),
      );
    }
  }, 60_000);
});
