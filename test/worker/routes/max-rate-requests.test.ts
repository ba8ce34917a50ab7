/**
 * What a subscribe's `max_rate` may be (docs/api.md, "Each reader's rate"): any rate shorthand worth
 * 1/s to 1000/s, on WebSocket and SSE alike; anything else answers 400 before any upgrade. And how
 * `CONFLATE_KEYS` is read: most specific first in the manifest, a bad value failing closed.
 */
import { describe, expect, it } from "vitest";
import { callAndWait, envWith, freshIp, uniq } from "../../support/helpers";

async function subscribe(ch: string, query: string, mode: "ws" | "sse"): Promise<Response> {
  const headers: Record<string, string> = { "cf-connecting-ip": freshIp() };
  if (mode === "ws") headers.upgrade = "websocket";
  else headers.accept = "text/event-stream";
  return callAndWait(`/v1/subscribe/${ch}${query}`, { headers });
}

describe("max_rate on a subscribe", () => {
  it("takes any rate shorthand from 1/s to 1000/s, over WebSocket and SSE", async () => {
    for (const mode of ["ws", "sse"] as const) {
      for (const ok of ["1/s", "5/s", "120/m", "60/m", "1000/s", "3/2s", "1/999ms", " 5/s "]) {
        const res = await subscribe(`public:rates.${uniq()}`, `?max_rate=${encodeURIComponent(ok)}`, mode);
        expect(res.status, `${mode} ${ok}`).toBe(mode === "ws" ? 101 : 200);
        if (res.webSocket) {
          res.webSocket.accept();
          res.webSocket.close();
        } else await res.body?.cancel();
      }
    }
  });

  it("answers 400 for a rate outside 1/s..1000/s, an empty value or anything not a rate", async () => {
    for (const mode of ["ws", "sse"] as const) {
      for (const bad of ["", "30/m", "59/m", "0/s", "1001/s", "2002/2s", "abc", "5", "5/x", "1.5/s", "/s", "5/"]) {
        const res = await subscribe(`public:rates.${uniq()}`, `?max_rate=${encodeURIComponent(bad)}`, mode);
        expect(res.status, `${mode} "${bad}"`).toBe(400);
        const body = (await res.json()) as { msg: string };
        expect(body.msg).toContain("max_rate must be a rate from 1/s to 1000/s");
      }
    }
  });
});

describe("CONFLATE_KEYS", () => {
  it("the manifest lists the rules most specific first, and an empty list when there are none", async () => {
    const m = (await (await callAndWait("/v1/manifest")).json()) as { conflate_keys: unknown };
    // This suite's CONFLATE_KEYS (test/vitest.config.ts).
    expect(m.conflate_keys).toEqual([
      { pattern: "public:conflate.deep.*", pointer: "/a/0" },
      { pattern: "public:conflate.**", pointer: "/match" },
    ]);
    const none = await callAndWait("/v1/manifest", {}, envWith({ CONFLATE_KEYS: "" }));
    expect(((await none.json()) as { conflate_keys: unknown }).conflate_keys).toEqual([]);
  });

  it("a bad pointer, value, pattern or JSON fails closed, naming the variable", async () => {
    for (const bad of [
      '{"public:live.*":"match"}',
      '{"public:live.*":"/a~2"}',
      '{"public:live.*":3}',
      '{"live.*":"/m"}',
      "[]",
      "{x",
    ]) {
      const res = await callAndWait("/healthz", {}, envWith({ CONFLATE_KEYS: bad }));
      expect(res.status, bad).toBe(500);
      expect(await res.text(), bad).toContain("CONFLATE_KEYS");
    }
  });
});
