/**
 * No unusable tokens: a mint whose token would exceed the size every route accepts is refused, naming the limit.
 */
import { describe, expect, it } from "vitest";
import { MAX_TOKEN_LENGTH } from "../../../src/worker/auth/tokens";
import { adminHeaders, callAndWait, freshIp, mint, publishTo, uniq } from "../../support/helpers";

describe("no unusable tokens", () => {
  // 199 characters each, about the longest a pattern some channel can match (a channel name is at
  // most 200 characters: a longer pattern is refused as unmatchable before its length matters).
  const longPattern = (i: number) => `public:${String(i).padStart(64, "a")}.${"b".repeat(64)}.${"c".repeat(60)}.*`;

  it("refuses a mint whose token would exceed the size every route accepts, naming the limit", async () => {
    const res = await callAndWait("/v1/tokens", {
      method: "POST",
      headers: adminHeaders({ "cf-connecting-ip": freshIp() }),
      body: JSON.stringify({ sub: uniq("big"), channels: Array.from({ length: 32 }, (_, i) => longPattern(i)) }),
    });
    expect(res.status).toBe(400);
    const body = (await res.json()) as { code: string; msg: string; meta: Record<string, string> };
    expect(body).toMatchObject({
      code: "invalid_argument",
      meta: { code: "INVALID_ARGUMENT", limit: "max_token_length" },
    });
    expect(body.msg).toContain(`${MAX_TOKEN_LENGTH}-character limit`);
    expect(body.meta.max_token_length).toBe(String(MAX_TOKEN_LENGTH));
    // With fewer patterns the pair is issued, and both tokens work.
    const fits = [...Array.from({ length: 20 }, (_, i) => longPattern(i)), "public:bound.*"];
    const ok = await mint({ sub: uniq("fits"), channels: fits });
    expect(ok.refresh_token.length).toBeGreaterThan(MAX_TOKEN_LENGTH / 2);
    expect(ok.refresh_token.length).toBeLessThanOrEqual(MAX_TOKEN_LENGTH);
    expect((await publishTo(`public:bound.${uniq()}`, ok.access_token, { ok: true })).status).toBe(200);
    const refreshed = await callAndWait("/v1/tokens/refresh", {
      method: "POST",
      headers: { "cf-connecting-ip": freshIp() },
      body: JSON.stringify({ refresh_token: ok.refresh_token }),
    });
    expect(refreshed.status).toBe(200);
  });
});
