/**
 * Pusher connections from pages on other origins (docs/api.md, "Browsers on other origins"), as
 * pusher-js in a browser makes them: with `CORS_ORIGINS` `*` beside a listed origin, a page on any
 * other origin gets a connection for public reads only — its private and presence subscribes are
 * `pusher:subscription_error` 403, even with a good signature from the app's backend, so it can send
 * no client events either — while the listed origin, and a client that sends no `Origin` (a server,
 * a native app), subscribe as before.
 *
 * A Floodgate of its own with `CORS_ORIGINS`, and in front of it a stand-in for the browser's part:
 * pusher-js in Node sends no `Origin`, so each upgrade gets the one its path names (./edge.ts).
 */
import Pusher from "pusher";
import PusherJS from "pusher-js";
import { afterAll, afterEach, beforeAll, describe, expect, it } from "vitest";
import { edgeInFrontOf, headerInPath } from "./edge";
import { backendAuthorization, subscribed, uniq } from "./floodgate";
import { PUSHER, pusherFloodgate } from "./global-setup";

const LISTED = "https://app.example";

let worker: { base: string; stop(): Promise<void> };
let edge: { port: number; stop(): void };

beforeAll(async () => {
  worker = await pusherFloodgate({ CORS_ORIGINS: `*, ${LISTED}` });
  // `/origin/<origin>/app/…` is the page on <origin> opening `/app/…`.
  edge = await edgeInFrontOf(new URL(worker.base), headerInPath("origin", "Origin"));
});
afterAll(async () => {
  edge?.stop();
  await worker?.stop();
});

const clients: PusherJS[] = [];
afterEach(() => {
  for (const c of clients.splice(0)) c.disconnect();
});

/** pusher-js on a page of `origin` (null: no `Origin`, as a server or a native app connects), its auth from the app's backend. */
function pageOn(origin: string | null): PusherJS {
  const url = new URL(worker.base);
  const c = new PusherJS(PUSHER.key, {
    cluster: "local",
    wsHost: "127.0.0.1",
    wsPort: origin === null ? Number(url.port) : edge.port,
    ...(origin === null ? {} : { wsPath: `/origin/${encodeURIComponent(origin)}` }),
    forceTLS: false,
    enabledTransports: ["ws"],
    disableStats: true,
    channelAuthorization: backendAuthorization(() => ({ user_id: "visitor" })),
  });
  clients.push(c);
  return c;
}

/** The `pusher` server library, pointed at this file's Floodgate. */
function backend(): Pusher {
  const url = new URL(worker.base);
  return new Pusher({ ...PUSHER, host: url.hostname, port: url.port, useTLS: false });
}

async function refusal(c: PusherJS, name: string): Promise<unknown> {
  return await subscribed(c, name).then(
    () => expect.fail(`${name} subscribed from a page that may make public reads only`),
    (e: { detail: unknown }) => e.detail,
  );
}

describe("CORS_ORIGINS=* and Pusher connections, with pusher-js", () => {
  it("a page on an unlisted origin: private and presence subscribes are subscription_error 403 even when signed; a public channel subscribes and gets its events", async () => {
    const c = pageOn("https://any.example");
    for (const name of [`private-${uniq()}`, `presence-${uniq()}`]) {
      expect(await refusal(c, name), name).toEqual({
        type: "AuthError",
        error: expect.stringContaining("CORS_ORIGINS"),
        status: 403,
      });
    }
    const name = uniq("public-");
    const channel = await subscribed(c, name);
    const got = new Promise<unknown>((resolve) => channel.bind("news", resolve));
    await backend().trigger(name, "news", { n: 1 });
    expect(await got).toEqual({ n: 1 });
  });

  it("the listed origin, and a client that sends no Origin, subscribe to private and presence channels as before", async () => {
    for (const origin of [LISTED, null]) {
      const c = pageOn(origin);
      await subscribed(c, `private-${uniq()}`);
      await subscribed(c, `presence-${uniq()}`);
    }
  });
});
