/**
 * Client events through the Pusher door in workerd (docs/api.md, "The Pusher door"): publishes by a
 * connection, on private and presence channels only, never echoed, with `user_id` on presence,
 * bounded per connection (4301) and in size, passing the before-publish throttle (a drop is recorded).
 */
import { runDurableObjectAlarm, runInDurableObject } from "cloudflare:test";
import { afterEach, describe, expect, it } from "vitest";
import { channelStub } from "../../src/platform/stubs";
import { makeSummaryDue, openSummaryDrops } from "../support/channel-internals";
import { adminHeaders, call, env, historyOf, mint, setRate, uniq, until } from "../support/helpers";
import { authFor, closePushers, dataOf, openPusher, type PusherSocket } from "../support/pusher";

const ANALYTICS = "private:floodgate.analytics.dropped";

async function pair(channel: string, member = false): Promise<[PusherSocket, PusherSocket]> {
  const out: PusherSocket[] = [];
  for (const user of ["ann", "ben"]) {
    const p = await openPusher();
    const auth = await authFor(p, channel, member ? { user_id: user } : undefined);
    expect((await p.subscribe(channel, auth)).event).toBe("pusher_internal:subscription_succeeded");
    out.push(p);
  }
  return out as [PusherSocket, PusherSocket];
}

async function metricValue(series: string): Promise<number> {
  const text = await (await call("/metrics", { headers: adminHeaders() })).text();
  const line = text.split("\n").find((l) => l.startsWith(`${series} `));
  return line ? Number(line.split(" ")[1]) : 0;
}

afterEach(async () => {
  await env.THROTTLE_KV.delete("throttleRate");
});

afterEach(closePushers);
describe("client events", () => {
  it("reach the channel's other subscribers with data as sent, never the sender", async () => {
    const name = `private-${uniq()}`;
    const [a, b] = await pair(name);
    a.send({ event: "client-typing", channel: name, data: { who: "a" } });
    const got = await b.next((e) => e.event === "client-typing");
    expect(got).toEqual({ event: "client-typing", channel: name, data: '{"who":"a"}' });
    // b got it, so the host sent it to the lane: the sender was passed over, not still waiting for it.
    await a.barrier();
    expect(a.events.filter((e) => e.event === "client-typing")).toEqual([]);
    // And history holds the event as a Floodgate message {"event","data"}.
    const token = (await mint({ sub: uniq("r"), channels: ["pusher:**"], scopes: ["subscribe"] })).access_token;
    const [m] = await historyOf(`pusher:${name}`, token);
    expect(m?.data).toEqual({ event: "client-typing", data: '{"who":"a"}' });
    a.ws.close();
    b.ws.close();
  });

  it("carry the sender's user_id on a presence channel", async () => {
    const name = `presence-${uniq()}`;
    const [a, b] = await pair(name, true);
    a.send({ event: "client-wave", channel: name, data: "hi" });
    expect(await b.next((e) => e.event === "client-wave")).toEqual({
      event: "client-wave",
      channel: name,
      data: "hi",
      user_id: "ann",
    });
    a.ws.close();
    b.ws.close();
  });

  it("are refused with pusher:error on a public or unsubscribed channel, or with data over MAX_MESSAGE_BYTES", async () => {
    const pub = uniq("pub-");
    const p = await openPusher();
    await p.subscribe(pub);
    p.send({ event: "client-x", channel: pub, data: {} });
    await p.next((e) => e.event === "pusher:error" && (e.data as { message: string }).message.includes("private"));
    p.send({ event: "client-x", channel: `private-${uniq()}`, data: {} });
    await p.next(
      (e) => e.event === "pusher:error" && (e.data as { message: string }).message.includes("not subscribed"),
    );
    const name = `private-${uniq()}`;
    await p.subscribe(name, await authFor(p, name));
    p.send({ event: "client-x", channel: name, data: "x".repeat(32_769) });
    await p.next(
      (e) => e.event === "pusher:error" && (e.data as { message: string }).message.includes("MAX_MESSAGE_BYTES"),
    );
    p.ws.close();
  });

  it("past PUSHER_CLIENT_EVENTS_RATE: pusher:error 4301, not delivered, counted", async () => {
    const name = `private-${uniq()}`;
    const [a, b] = await pair(name);
    const series = 'floodgate_pusher_errors_total{kind="error",code="4301"}';
    const before = await metricValue(series);
    // Sent at once; the burst (10) goes through, then at most what refills while they are read.
    const sent = 40;
    for (let i = 0; i < sent; i++) a.send({ event: "client-n", channel: name, data: String(i) });
    await a.barrier();
    const refused = a.events.filter((e) => e.event === "pusher:error");
    expect(refused.length).toBeGreaterThan(0);
    expect(refused.every((e) => (e.data as { code: number }).code === 4301)).toBe(true);
    // Everything accepted arrives (in order), nothing refused does.
    await until(() => b.events.filter((e) => e.event === "client-n").length === sent - refused.length, "accepted ones");
    const got = b.events.filter((e) => e.event === "client-n").map((e) => Number(e.data));
    expect(got.length).toBeGreaterThanOrEqual(10);
    expect(got).toEqual([...got].sort((x, y) => x - y));
    await until(async () => (await metricValue(series)) >= before + refused.length, "4301s counted");
    a.ws.close();
    b.ws.close();
  });

  it("pass the before-publish throttle: at drop rate 1 a client event is dropped and recorded", async () => {
    const name = `private-${uniq()}`;
    const channel = `pusher:${name}`;
    const [a, b] = await pair(name);
    await setRate(channel, 1);
    a.send({ event: "client-dropped", channel: name, data: { n: 1 } });
    const reader = (
      await mint({ sub: uniq("analyst"), channels: ["private:floodgate.analytics.dropped"], scopes: ["subscribe"] })
    ).access_token;
    const mine = async () =>
      (await historyOf(ANALYTICS, reader, `?source_channel=${encodeURIComponent(channel)}`)).map(
        (f) => f.data as Record<string, unknown>,
      );
    await until(async () => (await mine()).length === 1, "the client event's copy in the record");
    const [copy] = await mine();
    expect(copy).toMatchObject({
      source_channel: channel,
      message: { event: "client-dropped", data: '{"n":1}' },
      publisher: a.socketId,
      drop_rate: 1,
    });
    await b.barrier();
    expect(b.events.filter((e) => e.event === "client-dropped")).toEqual([]);
    a.ws.close();
    b.ws.close();
  });

  it("dropped on a channel with a summary rule, count under the key their data gives", async () => {
    const name = `private-summary.${uniq()}`;
    const channel = `pusher:${name}`;
    const [a, b] = await pair(name);
    await setRate(channel, 1);
    for (const emoji of ["🔥", "👏", "🔥"]) a.send({ event: "client-react", channel: name, data: { emoji } });
    const stub = channelStub(env, channel);
    await until(
      async () => (await runInDurableObject(stub, (instance) => openSummaryDrops(instance))) === 3,
      "three drops in the open summary interval",
    );
    await runInDurableObject(stub, (instance) => makeSummaryDue(instance));
    await runDurableObjectAlarm(stub);
    const summary = await b.next((e) => e.event === "floodgate:summary");
    expect(dataOf(summary)).toMatchObject({ type: "summary", channel, dropped: 3 });
    expect((dataOf(summary) as { by_key: unknown }).by_key).toEqual({ "🔥": 2, "👏": 1 });
    a.ws.close();
    b.ws.close();
  });
});
