/**
 * Reads cannot starve a channel (docs/api.md, "Bounds"): history and presence answers are shared for
 * up to a second between the readers of one isolate, through real request contexts
 * (`exports.default.fetch`): however many read at once, the channel's object is asked once; an answer
 * is at most about a second old, and never older than asked (`after` past what is shared, or another
 * epoch, is the channel's to answer); and who may read is still checked for every request.
 */
import { exports } from "cloudflare:workers";
import { describe, expect, it } from "vitest";
import { wipeIdleChannel } from "../../support/channel-internals";
import { BASE, freshIp, grown, mint, publishTo, scrapeMetrics, uniq, until } from "../../support/helpers";
import { APP, signedApiCall } from "../../support/pusher";

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

  it("a Pusher channel's events stored longer than MAX_MESSAGE_BYTES: a page cut for its bytes is not taken as the whole history", async () => {
    const name = `reads-big.${uniq()}`;
    // 32,768 quotes of data, 65,559 characters each once stored as {"event","data"} JSON-escaped: the
    // object cuts its 4 MiB pages at 63, which MAX_MESSAGE_BYTES alone would not have allowed for.
    const data = '"'.repeat(32_768);
    for (let i = 0; i < 64; i++) {
      const res = await signedApiCall("POST", `/apps/${APP.id}/events`, {}, { name: "e", data, channels: [name] });
      expect(res.status).toBe(200);
    }
    const seqs = async (query: string) =>
      (
        (await (await read(`/v1/history/pusher:${name}${query}`)).json()) as { messages: { seq: number }[] }
      ).messages.map((m) => m.seq);
    // The newest page (the shared answer) holds 2–64; the page from the start is the object's to answer.
    expect(await seqs("")).toEqual(Array.from({ length: 63 }, (_, i) => i + 2));
    expect(await seqs("?after=0")).toEqual(Array.from({ length: 63 }, (_, i) => i + 1));
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

type Page = { messages: { epoch: string; seq: number }[] };

/** A history page's `[epoch, seq]`s (status 200 expected). */
async function entries(path: string): Promise<[string, number][]> {
  const res = await read(path);
  expect(res.status).toBe(200);
  return ((await res.json()) as Page).messages.map((m) => [m.epoch, m.seq]);
}

/**
 * Runs `scenario` on fresh channels until one met the history it read first still shared when it
 * began asking past it (it answers its channel then, else null): what it checks is what reads beyond a
 * stale shared answer give, and on a busy machine a second may pass first, when there is none.
 */
async function whileShared(scenario: () => Promise<string | null>): Promise<string> {
  for (let run = 0; run < 5; run++) {
    const ch = await scenario();
    if (ch !== null) return ch;
  }
  throw new Error("no run met the shared history within its second");
}

/** Whether `ch`'s newest page is still `shared`. */
async function stillShared(ch: string, shared: [string, number][]): Promise<boolean> {
  return JSON.stringify(await entries(`/v1/history/${ch}`)) === JSON.stringify(shared);
}

describe("a shared history answer never reaches back past `after`", () => {
  it("after a seq newer than the shared answer: only newer messages, never the older ones", async () => {
    await whileShared(async () => {
      const ch = `public:reads.${uniq()}`;
      const t = (await mint({ sub: uniq(), channels: ["public:reads.*"] })).access_token;
      for (let i = 1; i <= 3; i++) expect((await publishTo(ch, t, i)).status).toBe(200);
      const shared = await entries(`/v1/history/${ch}`);
      expect(shared.map(([, seq]) => seq)).toEqual([1, 2, 3]);
      const fourth = await publishTo(ch, t, 4);
      const { epoch, seq } = (await fourth.json()) as { epoch: string; seq: number };
      expect(seq).toBe(4);
      if (!(await stillShared(ch, shared))) return null;
      // The client knows seq 4 (from its publish, or its socket): nothing newer yet.
      expect(await entries(`/v1/history/${ch}?after=4`)).toEqual([]);
      // Past the channel's head with no epoch: a restart, as the channel itself reads it (all it keeps).
      expect((await entries(`/v1/history/${ch}?after=5`)).map(([, s]) => s)).toEqual([1, 2, 3, 4]);
      // The answer those reads waited for was taken after seq 4 and is shared now.
      expect(await entries(`/v1/history/${ch}?after=3`)).toEqual([[epoch, 4]]);
      return ch;
    });
  });

  it("an epoch newer than the shared answer's (the channel restarted since): read in that epoch", async () => {
    await whileShared(async () => {
      const ch = `public:reads.${uniq()}`;
      const t = (await mint({ sub: uniq(), channels: ["public:reads.*"] })).access_token;
      for (let i = 1; i <= 3; i++) expect((await publishTo(ch, t, i)).status).toBe(200);
      const shared = await entries(`/v1/history/${ch}`);
      const old = shared[0]?.[0] as string;
      expect(shared).toEqual([
        [old, 1],
        [old, 2],
        [old, 3],
      ]);
      await wipeIdleChannel(ch);
      const { epoch, seq } = (await (await publishTo(ch, t, "new")).json()) as { epoch: string; seq: number };
      expect(epoch).not.toBe(old);
      expect(seq).toBe(1);
      if (!(await stillShared(ch, shared))) return null;
      // A client that saw the new epoch's seq 1: nothing newer, and none of the gone epoch's messages.
      expect(await entries(`/v1/history/${ch}?epoch=${epoch}&after=1`)).toEqual([]);
      expect(await entries(`/v1/history/${ch}?epoch=${epoch}&after=0`)).toEqual([[epoch, 1]]);
      // Past the head of the epoch it names: the channel's 400, as with no answer shared.
      expect((await read(`/v1/history/${ch}?epoch=${epoch}&after=2`)).status).toBe(400);
      return ch;
    });
  });
});
