/**
 * Reads cannot starve a channel (docs/api.md, "Bounds"): history and presence answers are shared for
 * up to a second between the readers of one isolate, through real request contexts
 * (`exports.default.fetch`): however many read at once, the channel's object is asked once; an answer
 * is at most about a second old; and who may read is still checked for every request.
 */
import { exports } from "cloudflare:workers";
import { describe, expect, it } from "vitest";
import { BASE, freshIp, grown, mint, publishTo, scrapeMetrics, uniq, until } from "../../support/helpers";

const CHANNEL_CALLS = 'floodgate_object_calls_total{object="channel"}';

function read(path: string, headers: Record<string, string> = {}): Promise<Response> {
  return exports.default.fetch(new Request(BASE + path, { headers: { "cf-connecting-ip": freshIp(), ...headers } }));
}

/** How many calls to channel objects were counted since `before` (the counts flush on their own). */
async function channelCallsSince(before: Record<string, number>, atLeast: number): Promise<number> {
  let n = 0;
  await until(async () => {
    n = grown(before, await scrapeMetrics())[CHANNEL_CALLS] ?? 0;
    return n >= atLeast;
  }, `${atLeast} channel calls counted`);
  return n;
}

describe("shared reads", () => {
  it("40 readers of a channel's history and 40 of its presence at once: one call to the channel's object each", async () => {
    const ch = `public:reads.${uniq()}`;
    const t = (await mint({ sub: uniq(), channels: ["public:reads.*"] })).access_token;
    for (let i = 0; i < 3; i++) expect((await publishTo(ch, t, i)).status).toBe(200);
    const before = await scrapeMetrics();
    const answers = await Promise.all([
      ...Array.from({ length: 40 }, (_, i) => read(`/v1/history/${ch}${i % 2 ? "?after=1" : ""}`)),
      ...Array.from({ length: 40 }, () => read(`/v1/presence/${ch}`)),
    ]);
    expect(answers.map((r) => r.status)).toEqual(Array(80).fill(200));
    const bodies = (await Promise.all(answers.map((r) => r.json()))) as { messages?: { seq: number }[] }[];
    for (const [i, b] of bodies.slice(0, 40).entries())
      expect(b.messages?.map((m) => m.seq)).toEqual(i % 2 ? [2, 3] : [1, 2, 3]);
    for (const b of bodies.slice(40)) expect(b).toMatchObject({ channel: ch, occupancy: 0 });
    // Two calls: one snapshot of the history (any page it covers), one presence.
    expect(await channelCallsSince(before, 2)).toBe(2);
  });

  it("an answer is at most about a second old: a new message shows in the next answer asked after that", async () => {
    const ch = `public:reads.${uniq()}`;
    const t = (await mint({ sub: uniq(), channels: ["public:reads.*"] })).access_token;
    expect((await publishTo(ch, t, "first")).status).toBe(200);
    expect(((await (await read(`/v1/history/${ch}`)).json()) as { messages: unknown[] }).messages).toHaveLength(1);
    expect((await publishTo(ch, t, "second")).status).toBe(200);
    const published = Date.now();
    await until(
      async () => ((await (await read(`/v1/history/${ch}`)).json()) as { messages: unknown[] }).messages.length === 2,
      "the second message in history",
    );
    // The answer shared is asked again a second after its ask began (the request's own time on top).
    expect(Date.now() - published).toBeLessThan(3000);
  });

  it("a private channel's shared answer reaches only readers its token admits", async () => {
    const ch = `private:reads.team.${uniq()}`;
    const member = (await mint({ sub: uniq("m"), channels: ["private:reads.team.*"] })).access_token;
    const other = (await mint({ sub: uniq("o"), channels: ["private:reads.other.*"] })).access_token;
    expect((await publishTo(ch, member, "secret")).status).toBe(200);
    const ok = await read(`/v1/history/${ch}`, { authorization: `Bearer ${member}` });
    expect(ok.status).toBe(200);
    expect(JSON.stringify(await ok.json())).toContain("secret");
    expect((await read(`/v1/presence/${ch}`, { authorization: `Bearer ${member}` })).status).toBe(200);
    // Within the second the answers are shared: still refused without a token, or with another's.
    for (const path of [`/v1/history/${ch}`, `/v1/presence/${ch}`]) {
      const none = await read(path);
      expect(none.status).toBe(401);
      expect(await none.text()).not.toContain("secret");
      const wrong = await read(path, { authorization: `Bearer ${other}` });
      expect(wrong.status).toBe(403);
      expect(await wrong.text()).not.toContain("secret");
    }
  });
});
