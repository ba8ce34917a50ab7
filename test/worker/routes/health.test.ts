import { describe, expect, it } from "vitest";
import { call } from "../../support/helpers";

describe("health", () => {
  it("answers ok", async () => {
    const res = await call("/healthz");
    expect(res.status).toBe(200);
    expect(await res.json()).toEqual({ ok: true });
  });
});
