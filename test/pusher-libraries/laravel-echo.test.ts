/**
 * A Laravel app's client, Laravel Echo on pusher-js, moved to Floodgate by its host, port and key
 * (README, "Coming from Pusher"), with no backend of its own for authorizations: Echo's bearer token is
 * a Floodgate access token and its auth endpoint `POST /v1/pusher/auth` (docs/api.md, "The Pusher
 * door"). A private channel's events and a presence channel's members, as Echo hands them to the app.
 */
import Echo from "laravel-echo";
import PusherJS from "pusher-js";
import { afterEach, describe, expect, it } from "vitest";
import { floodgate, HOST, PORT, PUSHER, server, token, uniq, until } from "./floodgate";

const echoes: Echo<"pusher">[] = [];
afterEach(() => {
  for (const e of echoes.splice(0)) e.disconnect();
});

function echo(bearerToken: string): Echo<"pusher"> {
  const e = new Echo({
    broadcaster: "pusher",
    Pusher: PusherJS,
    key: PUSHER.key,
    cluster: "local",
    wsHost: HOST,
    wsPort: PORT,
    forceTLS: false,
    enabledTransports: ["ws"],
    disableStats: true,
    authEndpoint: `${floodgate.base}/v1/pusher/auth`,
    bearerToken,
    // Echo's default `auth` object is shared by every Echo of a process (one per page in a browser):
    // each of these two users gets its own.
    auth: { headers: {} },
  });
  echoes.push(e);
  return e;
}

describe("Laravel Echo", () => {
  it("listens on a private channel authorized by POST /v1/pusher/auth; events arrive as broadcast", async () => {
    const order = uniq("orders.");
    const bearer = await token("shopper", [`pusher:private-${order}`]);
    const e = echo(bearer);
    const got: unknown[] = [];
    const subscribedNow = new Promise<void>((resolve) =>
      e
        .private(order)
        .subscribed(() => resolve())
        .listen(".OrderShipped", (d: unknown) => got.push(d)),
    );
    await subscribedNow;
    await server().trigger(`private-${order}`, "OrderShipped", { order: 7, status: "shipped" });
    await until(() => got.length === 1, "the event");
    expect(got).toEqual([{ order: 7, status: "shipped" }]);
  });

  it("joins a presence channel: here, joining and leaving with the members' ids (the tokens' subs)", async () => {
    const room = uniq("room.");
    const pattern = [`pusher:presence-${room}`];
    const [alice, bob] = [echo(await token("alice", pattern)), echo(await token("bob", pattern))];
    let here: { user_id?: string; id?: string }[] = [];
    const joined: unknown[] = [];
    const left: unknown[] = [];
    await new Promise<void>((resolve) =>
      alice
        .join(room)
        .here((users: typeof here) => {
          here = users;
          resolve();
        })
        .joining((u: unknown) => joined.push(u))
        .leaving((u: unknown) => left.push(u)),
    );
    expect(here).toHaveLength(1);
    let bobHere: unknown[] = [];
    await new Promise<void>((resolve) =>
      bob.join(room).here((users: unknown[]) => {
        bobHere = users;
        resolve();
      }),
    );
    expect(bobHere).toHaveLength(2);
    await until(() => joined.length === 1, "bob joining");
    bob.leave(room);
    await until(() => left.length === 1, "bob leaving");
    const members = (await (await server().get({ path: `/channels/presence-${room}/users` })).json()) as {
      users: { id: string }[];
    };
    expect(members.users).toEqual([{ id: "alice" }]);
  });
});
