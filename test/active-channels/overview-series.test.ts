/**
 * The dashboard's series (src/active-channels/series.ts): the overview answers both loops'
 * decisions since a run began — the fast loop's every period and the sweep's — so a page opened
 * mid-run, or reloaded, charts the run from its first period; and the registry keeps the series
 * bounded in points per channel and in channels.
 *
 * Targets come from test/vitest.config.ts: `public:fastloop.*` → 1/s; `SAMPLER_FAST_PERIOD` is 10m,
 * so a fast period ends only when the test moves its start back and runs the alarm.
 */
import { runDurableObjectAlarm, runInDurableObject } from "cloudflare:test";
import { env } from "cloudflare:workers";
import { describe, expect, it } from "vitest";
import { SERIES_CHANNELS, SERIES_POINTS, type SeriesPoint } from "../../src/active-channels/series";
import { activeChannelsStub } from "../../src/platform/stubs";
import { backdatePeriod, counter, setCounters } from "../support/channel-internals";
import { adminHeaders, callAndWait, publishAndWait, publisher, uniq } from "../support/helpers";

const stub = (channel: string) => env.CHANNEL.get(env.CHANNEL.idFromName(channel));

interface Point extends SeriesPoint {
  offered_rate: number;
  delivered_rate: number;
  dropped_rate: number;
}
interface Entry {
  channel: string;
  series: Point[];
  snapshot: Point | null;
}

async function entryOf(channel: string): Promise<Entry | undefined> {
  const res = await callAndWait("/v1/admin/overview", { headers: adminHeaders() });
  expect(res.status).toBe(200);
  return ((await res.json()) as { channels: Entry[] }).channels.find((c) => c.channel === channel);
}

/** Ends the fast loop's current period as if it had lasted `ms`, then runs the alarm. */
async function endFastPeriod(channel: string, ms: number): Promise<void> {
  await runInDurableObject(stub(channel), (instance) => {
    expect(counter(instance, "fast_due_at")).toBeGreaterThan(0);
    const now = Date.now();
    setCounters(instance, { fast_started_at: now - ms, fast_due_at: now });
  });
  expect(await runDurableObjectAlarm(stub(channel))).toBe(true);
}

async function offer(channel: string, token: string, n: number): Promise<void> {
  for (let i = 0; i < n; i++) expect([200, 202]).toContain((await publishAndWait(channel, token, { i })).status);
}

const point = (at: number): SeriesPoint => ({
  at,
  by: "sweep",
  elapsed_ms: 10_000,
  delivered: 10,
  dropped: 0,
  occupancy: 0,
  allowed_rate: 5,
  drop_rate: 0,
});

describe("the overview's series", () => {
  it("holds every fast-loop decision and the sweep since the run began, the first unthrottled period included", async () => {
    const ch = `public:fastloop.${uniq()}`;
    const token = await publisher(["public:fastloop.*"]);
    await offer(ch, token, 20); // the run's first seconds: nothing throttled yet
    await endFastPeriod(ch, 5_000);
    await offer(ch, token, 20);
    await endFastPeriod(ch, 5_000);
    // Nothing reaches the registry before the sweep visits: the fast loop's points travel with it.
    expect((await entryOf(ch))?.series ?? []).toEqual([]);
    await backdatePeriod(ch, 10_000);
    expect((await callAndWait("/v1/admin/sample", { method: "POST", headers: adminHeaders() })).status).toBe(200);

    const entry = await entryOf(ch);
    expect(entry?.series.map((p) => p.by)).toEqual(["fast loop", "fast loop", "sweep"]);
    const [first, second, sweep] = (entry?.series ?? []) as [Point, Point, Point];
    expect(first.at).toBeLessThanOrEqual(second.at);
    expect(second.at).toBeLessThanOrEqual(sweep.at);
    // The first period ran unthrottled at 4/s against 1/s: all 20 delivered, then the loop cut in.
    expect(first).toMatchObject({ delivered: 20, dropped: 0, allowed_rate: 1 });
    expect(first.elapsed_ms).toBeGreaterThanOrEqual(5_000);
    expect(first.delivered_rate).toBeGreaterThan(3.5);
    expect(first.drop_rate).toBeGreaterThan(0.5);
    expect(second.dropped).toBeGreaterThan(0);
    expect(sweep.delivered + sweep.dropped).toBe(40);
    // Each point's rates are of its own period; the snapshot is the newest point.
    for (const p of entry?.series ?? []) {
      const secs = p.elapsed_ms / 1000;
      expect(p.delivered_rate).toBeCloseTo(p.delivered / secs, 2);
      expect(p.dropped_rate).toBeCloseTo(p.dropped / secs, 2);
      expect(p.offered_rate).toBeCloseTo((p.delivered + p.dropped) / secs, 2);
    }
    expect(entry?.snapshot).toEqual(sweep);
    // A second visit adds only what happened since: the points were taken, not copied.
    await backdatePeriod(ch, 10_000);
    await callAndWait("/v1/admin/sample", { method: "POST", headers: adminHeaders() });
    expect((await entryOf(ch))?.series.map((p) => p.by)).toEqual(["fast loop", "fast loop", "sweep", "sweep"]);
  });

  it(`keeps at most ${SERIES_POINTS} points per channel, the newest`, async () => {
    const ch = `public:series.${uniq()}`;
    const now = Date.now();
    const kept = await runInDurableObject(activeChannelsStub(env), (registry) => {
      registry.markSeen(ch, now);
      for (let run = 0; run < 3; run++) {
        const points = Array.from({ length: 100 }, (_, i) => point(now - 300_000 + run * 100_000 + i * 1000));
        registry.finishRun([{ channel: ch, generation: 0, throttled: false, points }]);
      }
      return registry.series(ch);
    });
    expect(kept.length).toBe(SERIES_POINTS);
    expect(kept.at(-1)?.at).toBe(now - 300_000 + 2 * 100_000 + 99 * 1000);
    expect(kept.map((p) => p.at)).toEqual([...kept.map((p) => p.at)].sort((a, b) => a - b));
  });

  it(`keeps the series of the ${SERIES_CHANNELS} most recently seen channels only`, async () => {
    // Seen in the past, a millisecond apart: a time after now would outrank the channels other tests
    // see later in the shared registry and push their series out.
    const names = Array.from({ length: SERIES_CHANNELS + 20 }, () => `public:series.${uniq("n")}`);
    const now = Date.now() - names.length;
    const { channels, oldest, newest } = await runInDurableObject(activeChannelsStub(env), (registry, state) => {
      names.forEach((ch, i) => {
        registry.markSeen(ch, now + i);
        registry.finishRun([{ channel: ch, generation: 0, throttled: false, points: [point(now + i)] }]);
      });
      const count = state.storage.sql.exec<{ n: number }>("SELECT COUNT(DISTINCT channel) AS n FROM series").one().n;
      return {
        channels: count,
        oldest: registry.series(names[0] as string).length,
        newest: registry.series(names.at(-1) as string).length,
      };
    });
    expect(channels).toBeLessThanOrEqual(SERIES_CHANNELS);
    expect(oldest).toBe(0);
    expect(newest).toBe(1);
  });
});
