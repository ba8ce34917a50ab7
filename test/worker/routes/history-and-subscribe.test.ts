/**
 * Reading a channel: history pages, private channels behind a subscribe token, a subscribe that
 * neither upgrades nor asks for SSE refused, one check of `epoch` on both, and the API's 404 for
 * unknown routes.
 */
import { describe, expect, it } from "vitest";
import { call, historyOf, mint, publishTo, uniq } from "../../support/helpers";

const token = async (chs = ["public:pub.*", "private:pub.team.*"], scopes = ["publish", "subscribe"]) =>
  (await mint({ sub: uniq("p"), channels: chs, scopes })).access_token;

describe("history and subscribe rules", () => {
  it("returns the newest `limit` oldest first, or the first `limit` after a seq", async () => {
    const ch = `public:pub.${uniq()}`;
    const t = await token();
    for (let i = 1; i <= 12; i++) await publishTo(ch, t, i);
    expect((await historyOf(ch, null, "?limit=3")).map((f) => f.seq)).toEqual([10, 11, 12]);
    expect((await historyOf(ch, null, "?after=4&limit=3")).map((f) => f.seq)).toEqual([5, 6, 7]);
    expect((await historyOf(ch, null)).map((f) => f.seq)).toEqual([1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12]);
    for (const q of ["?limit=0", "?limit=1001", "?after=-1", "?after=x"]) {
      expect((await call(`/v1/history/${ch}${q}`)).status).toBe(400);
    }
  });

  it("private channels need a subscribe token for the channel; public ones need none", async () => {
    const ch = `private:pub.team.${uniq()}`;
    const t = await token();
    expect((await publishTo(ch, t, "secret")).status).toBe(200);
    expect((await call(`/v1/history/${ch}`)).status).toBe(401);
    expect((await call(`/v1/history/${ch}?token=${await token(["private:pub.team.*"], ["publish"])}`)).status).toBe(
      403,
    );
    expect((await call(`/v1/history/${ch}?token=${await token(["private:other.team.*"])}`)).status).toBe(403);
    expect((await historyOf(ch, t)).map((f) => f.data)).toEqual(["secret"]);
    const sse = await call(`/v1/subscribe/${ch}`, { headers: { accept: "text/event-stream" } });
    expect(sse.status).toBe(401);
    const ws = await call(`/v1/subscribe/${ch}?token=${t}`, { headers: { upgrade: "websocket" } });
    expect(ws.status).toBe(101);
    ws.webSocket?.accept();
    ws.webSocket?.close();
  });

  it("a subscribe that neither upgrades nor accepts SSE is a 400, not an upgrade", async () => {
    const res = await call("/v1/subscribe/public:pub.plain");
    expect(res.status).toBe(400);
    expect(await res.json()).toMatchObject({ code: "invalid_argument" });
    expect((await call("/v1/subscribe/nope", { headers: { upgrade: "websocket" } })).status).toBe(400);
  });

  it("a malformed epoch is one 400 on history and subscribe alike, with or without after", async () => {
    const ch = `public:pub.${uniq()}`;
    await publishTo(ch, await token(), 1);
    for (const q of ["?epoch=!!", `?epoch=${"e".repeat(65)}`, "?epoch=", "?epoch=!!&after=0"]) {
      const read = await call(`/v1/history/${ch}${q}`);
      const sub = await call(`/v1/subscribe/${ch}${q}`, { headers: { accept: "text/event-stream" } });
      expect([read.status, sub.status], q).toEqual([400, 400]);
      const body = await read.json();
      expect(body).toMatchObject({ code: "invalid_argument", msg: expect.stringMatching(/^epoch must be/) });
      expect(await sub.json(), q).toEqual(body);
    }
  });

  it("unknown routes answer the API's 404", async () => {
    const res = await call("/v1/nothing/here");
    expect(res.status).toBe(404);
    expect(await res.json()).toEqual({
      code: "bad_route",
      msg: expect.stringMatching(/^no such route: GET \/v1\/nothing\/here; /),
      meta: { code: "NOT_FOUND" },
    });
  });
});
