/**
 * A Pusher event whose copies fail only in part (docs/api.md, "Copies that fail"): a 503 only when no
 * copy was published, else 200 with each failed copy's fate `unavailable` and its reason, counted as a
 * refusal; and `info` counts that cannot be read after delivery leave their channel out, never turn a
 * delivered request into a 503. A channel's object is made to fail by its own method throwing, the
 * way test/worker/publish-batching.test.ts stalls one.
 */
import { describe, expect, it } from "vitest";
import { ChannelObject } from "../../../src/channel/channel-object";
import { channelOf } from "../../support/channel-internals";
import { historyOf, mint, refusalsGrown, scrapeMetrics, uniq, withFailing } from "../../support/helpers";
import { APP, signedApiCall } from "../../support/pusher";

const EPOCH = expect.stringMatching(/^[A-Za-z0-9_-]{12}$/);
const EVENTS = `/apps/${APP.id}/events`;
const BATCH = `/apps/${APP.id}/batch_events`;

/**
 * While `run` runs, `method` of the objects of `failing` (Pusher channel names) throws backend text.
 * A batch names its channel (a new object learns its name from it); a read asks an object that has one.
 */
function failingFor<T>(method: string, failing: string[], run: () => Promise<T>): Promise<T> {
  const names = failing.map((n) => `pusher:${n}`);
  const batchChannel = (args: unknown[]) => (args[0] as { channel?: string }[] | undefined)?.[0]?.channel;
  return withFailing(ChannelObject, method, "backend text that must not leak", run, (o, args) =>
    names.includes((method === "publishMany" ? batchChannel(args) : channelOf(o)) ?? ""),
  );
}

async function history(name: string): Promise<unknown[]> {
  const t = (await mint({ sub: uniq("r"), channels: ["pusher:**"], scopes: ["subscribe"] })).access_token;
  return (await historyOf(`pusher:${name}`, t)).map((m) => m.data);
}

describe("a Pusher event whose copies fail in part", () => {
  it("answers 200 with the failed copy's fate unavailable, publishes the others, and counts the failure", async () => {
    const [a, b] = [uniq("a-"), uniq("b-")];
    const before = await scrapeMetrics();
    const res = await failingFor("publishMany", [b], () =>
      signedApiCall("POST", EVENTS, {}, { name: "e", data: "1", channels: [a, b] }),
    );
    expect(res.status).toBe(200);
    const text = await res.text();
    expect(text).not.toContain("backend text");
    expect(JSON.parse(text)).toEqual({
      floodgate: {
        [a]: { status: "delivered", epoch: EPOCH, seq: 1 },
        [b]: { status: "unavailable", reason: "unavailable" },
      },
    });
    expect(await history(a)).toEqual([{ event: "e", data: "1" }]);
    expect(await history(b)).toEqual([]);
    expect(refusalsGrown(before, await scrapeMetrics())).toEqual({
      'floodgate_refusals_total{reason="unavailable"}': 1,
    });
  });

  it("answers 503 when no copy was published: nothing happened, so a retry delivers once", async () => {
    const [a, b] = [uniq("a-"), uniq("b-")];
    const before = await scrapeMetrics();
    const res = await failingFor("publishMany", [a, b], () =>
      signedApiCall("POST", EVENTS, {}, { name: "e", data: "1", channels: [a, b] }),
    );
    expect(res.status).toBe(503);
    expect(res.headers.get("floodgate-refusal")).toBe("unavailable");
    expect(res.headers.get("content-type")).toContain("text/plain");
    expect(await res.text()).not.toContain("backend text");
    // Counted once, as the request's refusal.
    expect(refusalsGrown(before, await scrapeMetrics())).toEqual({
      'floodgate_refusals_total{reason="unavailable"}': 1,
    });
    const retry = await signedApiCall("POST", EVENTS, {}, { name: "e", data: "1", channels: [a, b] });
    expect(retry.status).toBe(200);
    expect(await history(a)).toEqual([{ event: "e", data: "1" }]);
    expect(await history(b)).toEqual([{ event: "e", data: "1" }]);
  });

  it("a batch names the failed event's fate in its place, the others published", async () => {
    const [a, b, c] = [uniq("a-"), uniq("b-"), uniq("c-")];
    const batch = [a, b, c].map((channel, i) => ({ name: "e", data: String(i), channel }));
    const res = await failingFor("publishMany", [b], () => signedApiCall("POST", BATCH, {}, { batch }));
    expect(res.status).toBe(200);
    expect(await res.json()).toEqual({
      floodgate: [
        { [a]: { status: "delivered", epoch: EPOCH, seq: 1 } },
        { [b]: { status: "unavailable", reason: "unavailable" } },
        { [c]: { status: "delivered", epoch: EPOCH, seq: 1 } },
      ],
    });
    expect(await history(c)).toEqual([{ event: "e", data: "2" }]);
  });

  it("info counts that cannot be read after delivery leave that channel out; the request still answers 200", async () => {
    const [a, b] = [uniq("a-"), uniq("b-")];
    const res = await failingFor("pusherCounts", [b], () =>
      signedApiCall("POST", EVENTS, {}, { name: "e", data: "1", channels: [a, b], info: "subscription_count" }),
    );
    expect(res.status).toBe(200);
    expect(await res.json()).toEqual({
      channels: { [a]: { subscription_count: 0 } },
      floodgate: {
        [a]: { status: "delivered", epoch: EPOCH, seq: 1 },
        [b]: { status: "delivered", epoch: EPOCH, seq: 1 },
      },
    });
    expect(await history(a)).toEqual([{ event: "e", data: "1" }]);
    expect(await history(b)).toEqual([{ event: "e", data: "1" }]);
  });
});
