/**
 * A Pusher connection counts toward its client's MAX_CONNECTIONS_PER_CLIENT (docs/api.md, "The Pusher
 * door"; "Relays"): pusher-js past it is sent `pusher:error` 4100 and closed with 4100, so it backs
 * off and retries, and gets in once one of the client's connections closes. A Floodgate of its own,
 * with a cap of 2: every connection from this machine is one client, which the other library tests
 * share on the run's Floodgate.
 */
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { client, until } from "./floodgate";
import { pusherFloodgate } from "./global-setup";

let worker: { base: string; stop(): Promise<void> };
beforeAll(async () => {
  worker = await pusherFloodgate({ MAX_CONNECTIONS_PER_CLIENT: "2" });
});
afterAll(() => worker?.stop());

/** A pusher-js client of this file's Floodgate (the capped one), not the run's. */
function capped() {
  const url = new URL(worker.base);
  return client({ wsHost: url.hostname, wsPort: Number(url.port) });
}

describe("MAX_CONNECTIONS_PER_CLIENT at the Pusher door", () => {
  it("the third connection of a client with a cap of 2 gets pusher:error 4100; it retries and gets in once one closes", async () => {
    const [a, b] = [capped(), capped()];
    await until(() => a.connection.state === "connected" && b.connection.state === "connected", "two connections");
    const c = capped();
    const errors: number[] = [];
    // pusher-js reports the server's `pusher:error` as a WebSocketError around a PusherError.
    c.connection.bind("error", (e: { error?: { data?: { code?: number } } }) => {
      if (typeof e.error?.data?.code === "number") errors.push(e.error.data.code);
    });
    await until(() => errors.includes(4100), "the 4100 refusal");
    expect(c.connection.state).not.toBe("connected");
    a.disconnect();
    await until(() => c.connection.state === "connected", "the retry to get in", 25_000);
    expect(b.connection.state).toBe("connected");
    for (const p of [b, c]) p.disconnect();
  });
});
