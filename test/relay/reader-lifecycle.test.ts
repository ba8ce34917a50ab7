/**
 * A thinned subscriber across its subscription's life (docs/api.md, "Each reader's rate"): priority
 * messages published over HTTP pass its rate live and in a resume's replay (the channel marks them in
 * history); its rate survives its relay's eviction (kept in the socket's attachment); when its token
 * expires it gets a last summary before the `expired` frame, so received + skipped still covers
 * everything; and `/metrics` counts its skips and its thinning.
 */
import { evictDurableObject, runInDurableObject } from "cloudflare:test";
import { describe, expect, it } from "vitest";
import { TOKEN_EXPIRED_CLOSE } from "../../src/wire/close-codes";
import {
  adminHeaders,
  callAndWait,
  mint,
  publishTo,
  relayObject,
  uniq,
  until,
  untilUnsubscribed,
} from "../support/helpers";
import { accounted, publishDirect, readerSocket, relayClock } from "../support/reader-fixtures";

async function metric(series: string): Promise<number> {
  const text = await (await callAndWait("/metrics", { headers: adminHeaders() })).text();
  return Number(
    text
      .split("\n")
      .find((l) => l.startsWith(`${series} `))
      ?.split(" ")[1] ?? Number.NaN,
  );
}

describe("a thinned subscriber's life", () => {
  it("priority messages published over HTTP pass its rate, live and in a replay from history", async () => {
    const ch = `public:rates.${uniq()}`;
    const pub = await mint({
      sub: uniq("pub"),
      channels: ["public:rates.*"],
      scopes: ["publish", "priority"],
      rl: "1000/s",
    });
    const priority: number[] = [];
    for (let i = 0; i < 12; i++) {
      const high = i % 4 === 3;
      const res = await publishTo(ch, pub.access_token, { i }, high ? { "floodgate-priority": "high" } : {});
      const { seq } = (await res.json()) as { seq: number };
      if (high) priority.push(seq);
    }
    await relayClock(ch);
    // The replay: its bucket's one message, then every priority message of history.
    const sub = await readerSocket(ch, "?after=0&max_rate=1/s");
    await until(() => sub.messages.length === 1 + priority.length, "the replay's share");
    expect(sub.messages.map((m) => m.seq)).toEqual([1, ...priority]);
    // Live: the same.
    const live: number[] = [];
    for (let i = 0; i < 8; i++) {
      const high = i % 4 === 3;
      const res = await publishTo(ch, pub.access_token, { live: i }, high ? { "floodgate-priority": "high" } : {});
      if (high) live.push(((await res.json()) as { seq: number }).seq);
    }
    await until(() => sub.messages.length === 1 + priority.length + live.length, "the live priority messages");
    expect(sub.messages.map((m) => m.seq)).toEqual([1, ...priority, ...live]);
    sub.ws.close();
    await untilUnsubscribed(ch);
  });

  it("keeps its rate when its relay is evicted (the socket's attachment), and /metrics counts skips and thinnings", async () => {
    const ch = `public:rates.${uniq()}`;
    const skippedBefore = await metric("floodgate_readers_skipped_total");
    const thinnedBefore = await metric('floodgate_readers_thinned_total{reason="max_rate"}');
    const all = await readerSocket(ch);
    const one = await readerSocket(ch, "?max_rate=1/s");
    await evictDurableObject(relayObject(ch));
    const clock = await relayClock(ch);
    for (let i = 0; i < 10; i++) {
      await publishDirect(ch, { i });
      await until(() => all.messages.length === i + 1, `message ${i}`);
    }
    expect(one.messages.map((m) => m.seq)).toEqual([1]);
    clock.at += 2 * 3_600_000;
    await clock.tick();
    await until(() => one.summaries.length === 1, "summary");
    expect(accounted(one)).toBe(10);
    await until(
      async () => (await metric("floodgate_readers_skipped_total")) >= skippedBefore + 9,
      "skips in /metrics",
    );
    expect(await metric('floodgate_readers_thinned_total{reason="max_rate"}')).toBeGreaterThanOrEqual(
      thinnedBefore + 1,
    );
    // The dashboard's poll shows the same totals.
    const overview = (await (await callAndWait("/v1/admin/overview", { headers: adminHeaders() })).json()) as {
      readers: { skipped: number; thinned_max_rate: number; thinned_slow: number };
    };
    expect(overview.readers.skipped).toBe(await metric("floodgate_readers_skipped_total"));
    expect(overview.readers.thinned_max_rate).toBe(await metric('floodgate_readers_thinned_total{reason="max_rate"}'));
    all.ws.close();
    one.ws.close();
    await untilUnsubscribed(ch);
  });

  it("packed under FRAME_DELAY, its share goes out when the held frame does, in one array", async () => {
    const ch = `public:rates.${uniq()}`;
    const clock = await relayClock(ch);
    await runInDurableObject(relayObject(ch), (r) => {
      r.frameDelayMs = 40;
    });
    // Packed too, unthrottled: once it has every message, the held frame went out to both.
    const all = await readerSocket(ch, "?batch=1");
    const two = await readerSocket(ch, "?max_rate=2/s&batch=1");
    for (let i = 0; i < 6; i++) await publishDirect(ch, { i });
    await until(() => all.messages.length === 6, "the held frame");
    expect(two.messages.map((m) => m.seq)).toEqual([1, 2]);
    for (const { text } of two.raw) expect(text.startsWith("[")).toBe(true);
    clock.at += 2 * 3_600_000;
    await clock.tick();
    await until(() => two.summaries.length === 1, "summary");
    expect(accounted(two)).toBe(6);
    all.ws.close();
    two.ws.close();
    await untilUnsubscribed(ch);
  });

  it("when its token expires it gets a last summary, then the expired frame at its position", async () => {
    const ch = `public:rates.${uniq()}`;
    const pair = await mint({ sub: uniq("sub"), channels: ["public:rates.*"], scopes: ["subscribe"], ttl: "1m" });
    const exp =
      (
        JSON.parse(atob((pair.access_token.split(".")[1] ?? "").replace(/-/g, "+").replace(/_/g, "/"))) as {
          exp: number;
        }
      ).exp * 1000;
    const clock = await relayClock(ch);
    const all = await readerSocket(ch);
    const one = await readerSocket(ch, `?max_rate=1/s&token=${pair.access_token}`);
    for (let i = 0; i < 6; i++) {
      await publishDirect(ch, { i });
      await until(() => all.messages.length === i + 1, `message ${i}`);
    }
    clock.at = exp;
    await runInDurableObject(relayObject(ch), (r) => r.tick(exp));
    await until(() => one.closed() !== null, "the expiry");
    expect(one.closed()?.code).toBe(TOKEN_EXPIRED_CLOSE);
    expect(one.summaries).toHaveLength(1);
    expect(accounted(one)).toBe(6);
    const expired = one.raw.at(-1)?.text ?? "";
    expect(JSON.parse(expired)).toMatchObject({ type: "expired", seq: 6 });
    all.ws.close();
    await untilUnsubscribed(ch);
  });
});
