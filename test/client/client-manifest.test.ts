/** The TypeScript client reads the manifest (`GET /v1/manifest`) as the Worker serves it, typed. */
import { env } from "cloudflare:workers";
import { FloodgateClient, FloodgateError, type Manifest } from "@floodgate/client";
import { describe, expect, it } from "vitest";
import { settingsOf } from "../../src/settings/settings";
import { manifest } from "../../src/worker/routes/manifest";
import { BASE, callAndWait, envWith } from "../support/helpers";

/** A client whose requests reach the Worker with `vars` over the suite's configuration. */
function clientOn(vars: Record<string, string>) {
  const e = envWith(vars);
  return new FloodgateClient({
    baseUrl: BASE,
    fetch: (input, init) => callAndWait(input.slice(BASE.length), init, e),
  });
}

describe("FloodgateClient.manifest", () => {
  it("answers the deployment's effective settings, every field the Worker sends, without a token", async () => {
    const m: Manifest = await clientOn({
      MAX_MESSAGE_BYTES: "4096",
      HISTORY_LIMIT: "42",
      SESSION_TTL: "1d",
    }).manifest();
    expect(m.messages.max_bytes).toBe(4096);
    expect(m.messages.history_limit).toBe(42);
    expect(m.tokens.session_ttl).toBe("24h");
    expect(m).toEqual(
      JSON.parse(
        JSON.stringify(
          manifest(settingsOf(envWith({ MAX_MESSAGE_BYTES: "4096", HISTORY_LIMIT: "42", SESSION_TTL: "1d" }))),
        ),
      ),
    );
    expect(m.rate_limits.publish).toEqual(manifest(settingsOf(env)).rate_limits.publish);
  });

  it("rejects with the API's error when the server cannot answer (bad configuration names the variable)", async () => {
    const failed = await clientOn({ HISTORY_LIMIT: "many" })
      .manifest()
      .catch((e: unknown) => e);
    expect(failed).toBeInstanceOf(FloodgateError);
    expect(failed).toMatchObject({ status: 500, code: "internal" });
    expect((failed as FloodgateError).message).toContain("HISTORY_LIMIT");
  });
});
