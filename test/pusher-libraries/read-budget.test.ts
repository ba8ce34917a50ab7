/**
 * The client IP's read budget at the Pusher door (docs/api.md, "Bounds": reads are budgeted), as
 * pusher-js meets it: the connect and every subscribe with no signature that verifies (a public
 * channel, a private one signed wrong) take one token from `read:<ip>`, the bucket the client's
 * native subscribes and history reads take from, over all its connections. Past it, that channel's
 * `pusher:subscription_error` 429 `read rate limit exceeded`, counted as the native door's read
 * refusal (`floodgate_refusals_total{reason="read"}`); a subscribe the app signed takes nothing.
 *
 * A Floodgate of its own with a read budget of 3 that does not refill within a test, and in front of
 * it a stand-in for Cloudflare's edge, which gives each connection the client address its path names.
 */
import type PusherJS from "pusher-js";
import { afterAll, afterEach, beforeAll, describe, expect, it } from "vitest";
import { edgeInFrontOf, headerInPath } from "./edge";
import { client, server, subscribed, uniq, until } from "./floodgate";
import { pusherFloodgate } from "./global-setup";

let worker: { base: string; admin: string; stop(): Promise<void> };
let edge: { port: number; stop(): void };

beforeAll(async () => {
  worker = await pusherFloodgate({ METRICS_FLUSH_MS: "0", READ_RATE: "1/h", READ_BURST: "3" });
  edge = await edgeInFrontOf(new URL(worker.base), headerInPath("from", "CF-Connecting-IP"));
});
afterAll(async () => {
  edge?.stop();
  await worker?.stop();
});

const clients: PusherJS[] = [];
afterEach(() => {
  for (const c of clients.splice(0)) c.disconnect();
});

/** An address of its own for each test: the budget lasts the whole file. */
let n = 0;
function address(): string {
  n++;
  return `198.51.100.${n}`;
}

/** A pusher-js client connecting from `ip` through the edge; the app's backend signs private channels, wrongly those named `forged`. */
function from(ip: string): PusherJS {
  const app = server();
  const forger = server({ secret: "not-the-app-secret-0123" });
  const c = client({
    wsHost: "127.0.0.1",
    wsPort: edge.port,
    wsPath: `/from/${encodeURIComponent(ip)}`,
    channelAuthorization: {
      endpoint: "unused",
      transport: "ajax",
      customHandler: (
        params: { socketId: string; channelName: string },
        callback: (error: Error | null, data: { auth: string } | null) => void,
      ) => {
        const signer = params.channelName.includes("forged") ? forger : app;
        callback(null, signer.authorizeChannel(params.socketId, params.channelName));
      },
    },
  });
  clients.push(c);
  return c;
}

/** What a subscribe came to: "ok", or the subscription_error's status. */
function outcome(c: PusherJS, name: string): Promise<"ok" | number> {
  return subscribed(c, name).then(
    () => "ok" as const,
    (e: { detail: { status: number } }) => e.detail.status,
  );
}

/** The subscription_error of a refused subscribe (fails the test if it subscribes). */
function refusal(c: PusherJS, name: string): Promise<unknown> {
  return subscribed(c, name).then(
    () => expect.fail(`${name} subscribed where it should be refused`),
    (e: { detail: unknown }) => e.detail,
  );
}

const READ_REFUSAL = { type: "LimitReached", error: "read rate limit exceeded", status: 429 };

async function metric(prefix: string, labels: string[]): Promise<number> {
  const res = await fetch(`${worker.base}/metrics`, { headers: { authorization: `Bearer ${worker.admin}` } });
  const line = (await res.text())
    .split("\n")
    .find((l) => l.startsWith(prefix) && labels.every((label) => l.includes(label)));
  return line ? Number(line.slice(line.lastIndexOf(" ") + 1)) : 0;
}

describe("the client IP's read budget at the Pusher door, with pusher-js", () => {
  it("one connection's public subscribes past the budget (the connect took one) are subscription_error 429 read, counted", async () => {
    const refusals = () => metric("floodgate_refusals_total{", ['reason="read"']);
    const before = await refusals();
    const c = from(address());
    // Subscribed before the connection is up: pusher-js sends the three together.
    const tag = uniq("public-");
    const outcomes = await Promise.all([1, 2, 3].map((i) => outcome(c, `${tag}-${i}`)));
    expect(outcomes).toEqual(["ok", "ok", 429]);
    expect(await refusal(c, `${tag}-4`)).toEqual(READ_REFUSAL);
    await until(async () => (await refusals()) >= before + 2, "the read refusals in /metrics");
    expect(await refusals()).toBe(before + 2);
  });

  it("two connections of one IP share its budget; another IP's is untouched", async () => {
    const ip = address();
    const first = from(ip);
    await subscribed(first, uniq("shared-"));
    // The first connection took two tokens, the second's connect the last one.
    const second = from(ip);
    expect(await refusal(second, uniq("shared-"))).toEqual(READ_REFUSAL);
    expect(await refusal(first, uniq("shared-"))).toEqual(READ_REFUSAL);
    const other = from(address());
    await subscribed(other, uniq("other-"));
    await subscribed(other, uniq("other-"));
  });

  it("a private subscribe signed wrong takes a token (then 401); one the app signed takes none", async () => {
    const c = from(address());
    expect(await outcome(c, `private-forged-${uniq()}`)).toBe(401);
    await subscribed(c, uniq("public-"));
    // Spent: the connect, the forged signature, the public channel.
    expect(await refusal(c, uniq("public-"))).toEqual(READ_REFUSAL);
    expect(await refusal(c, `private-forged-${uniq()}`)).toEqual(READ_REFUSAL);
    await subscribed(c, `private-${uniq()}`);
  });
});
