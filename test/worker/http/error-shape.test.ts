/** The error type every refusal is built from. */
import { describe, expect, it } from "vitest";
import { ApiError } from "../../../src/wire/errors";
import { errorResponse } from "../../../src/worker/http/errors";

describe("ApiError", () => {
  it("captures no stack (refusals are answers, and a flood makes thousands a second) and leaves others alone", () => {
    const e = new ApiError("rate_limited", "publish rate limit exceeded", { bucket: "publish" });
    expect(e.stack).toBe("ApiError: publish rate limit exceeded");
    expect(e).toBeInstanceOf(Error);
    // Other errors still get their stacks: the limit is restored after each ApiError.
    expect(new Error("bug").stack).toMatch(/\n\s+at /);
  });

  it("renders the API's shape, and anything else as a generic 500 with no backend text", async () => {
    const res = errorResponse(new ApiError("rate_limited", "slow down", { bucket: "publish" }, { "Retry-After": "2" }));
    expect(res.status).toBe(429);
    expect(res.headers.get("retry-after")).toBe("2");
    expect(await res.json()).toEqual({
      code: "resource_exhausted",
      msg: "slow down",
      meta: { code: "RATE_LIMITED", bucket: "publish" },
    });
    const other = errorResponse(new Error("SQLITE_FULL: secret"));
    expect(other.status).toBe(500);
    expect(await other.text()).not.toContain("SQLITE");
  });
});
