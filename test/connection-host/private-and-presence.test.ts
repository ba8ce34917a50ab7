/**
 * Private and presence channels through the Pusher door in workerd (docs/api.md, "The Pusher door"):
 * signatures (a good one subscribes, a bad one is a 401 subscription_error and changes nothing),
 * presence members (distinct user ids, the set, member_added / member_removed) and its bounds.
 */
import { afterEach, describe, expect, it } from "vitest";
import { channelAuth } from "../../src/wire/pusher/signatures";
import { adminHeaders, call, uniq, until } from "../support/helpers";
import { APP, authFor, closePushers, dataOf, openPusher, type PusherSocket } from "../support/pusher";

async function statsOf(channel: string): Promise<{ websockets: number; relays: number }> {
  return (await (await call(`/v1/channels/${channel}/stats`, { headers: adminHeaders() })).json()) as {
    websockets: number;
    relays: number;
  };
}

async function joinPresence(channel: string, user: string, info?: unknown): Promise<[PusherSocket, unknown]> {
  const p = await openPusher();
  const answer = await p.subscribe(channel, await authFor(p, channel, { user_id: user, user_info: info }));
  expect(answer.event).toBe("pusher_internal:subscription_succeeded");
  return [p, dataOf(answer)];
}

afterEach(closePushers);
describe("private channels", () => {
  it("a good signature subscribes; a bad or missing one is subscription_error 401 and changes nothing", async () => {
    const name = `private-${uniq()}`;
    const p = await openPusher();
    const bad = await p.subscribe(name, { auth: `test-key:${"0".repeat(64)}` });
    expect(bad).toEqual({
      event: "pusher:subscription_error",
      channel: name,
      data: { type: "AuthError", error: expect.any(String), status: 401 },
    });
    expect((await p.subscribe(name)).event).toBe("pusher:subscription_error");
    // Signed for another socket: refused too.
    const other = await openPusher();
    expect((await p.subscribe(name, await authFor(other, name))).event).toBe("pusher:subscription_error");
    expect(await statsOf(`pusher:${name}`)).toMatchObject({ websockets: 0, relays: 0 });
    expect(await p.subscribe(name, await authFor(p, name))).toEqual({
      event: "pusher_internal:subscription_succeeded",
      channel: name,
      data: "{}",
    });
    expect(await statsOf(`pusher:${name}`)).toMatchObject({ websockets: 1, relays: 1 });
    p.ws.close();
    other.ws.close();
  });
});

describe("presence channels", () => {
  it("members are distinct user ids: the set on subscribe, member_added and member_removed for others", async () => {
    const name = `presence-${uniq()}`;
    const [alice, aliceSet] = await joinPresence(name, "alice", { name: "Alice" });
    expect(aliceSet).toEqual({ presence: { ids: ["alice"], hash: { alice: { name: "Alice" } }, count: 1 } });
    const [bob, bobSet] = await joinPresence(name, "bob", { name: "Bob" });
    expect(bobSet).toEqual({
      presence: { ids: ["alice", "bob"], hash: { alice: { name: "Alice" }, bob: { name: "Bob" } }, count: 2 },
    });
    const added = await alice.next((e) => e.event === "pusher_internal:member_added");
    expect(added.channel).toBe(name);
    expect(dataOf(added)).toEqual({ user_id: "bob", user_info: { name: "Bob" } });
    // Bob never hears of his own arrival.
    expect(bob.events.filter((e) => e.event === "pusher_internal:member_added")).toEqual([]);
    // Bob's second connection: one member still, nobody told.
    const [bob2, set2] = await joinPresence(name, "bob", { name: "Bob" });
    expect((set2 as { presence: { count: number } }).presence.count).toBe(2);
    bob2.ws.close();
    await until(async () => (await statsOf(`pusher:${name}`)).websockets === 2, "bob's second connection gone");
    // Bob's last connection leaves: member_removed, once.
    const from = alice.events.length;
    bob.ws.close();
    const removed = await alice.next((e) => e.event === "pusher_internal:member_removed", from);
    expect(dataOf(removed)).toEqual({ user_id: "bob" });
    expect(alice.events.filter((e) => e.event === "pusher_internal:member_added")).toHaveLength(1);
    alice.ws.close();
  });

  it("channel_data is signed with the subscription (401 when it is not), and a signed one that is no member Floodgate takes is 403", async () => {
    const name = `presence-${uniq()}`;
    const p = await openPusher();
    const auth = await authFor(p, name, { user_id: "mallory" });
    // The same signature with another user id: refused.
    const forged = await p.subscribe(name, { auth: auth.auth, channel_data: JSON.stringify({ user_id: "admin" }) });
    expect(forged.data).toEqual({
      type: "AuthError",
      error: "invalid signature: auth must sign <socket_id>:<channel>:<channel_data>",
      status: 401,
    });
    // No channel_data at all: nothing a presence signature could cover, even one over "<socket_id>:<channel>".
    const bare = await p.subscribe(name, await authFor(p, name));
    expect(bare).toMatchObject({ event: "pusher:subscription_error", channel: name, data: { status: 401 } });
    // Signed by the app, but not a member: user_info over 1 KiB, no user_id, not JSON.
    for (const channelData of [
      JSON.stringify({ user_id: "big", user_info: { x: "y".repeat(1100) } }),
      JSON.stringify({ user_info: {} }),
      "not json",
    ]) {
      const signed = { auth: await channelAuth(APP, p.socketId, name, channelData), channel_data: channelData };
      const refused = await p.subscribe(name, signed);
      expect(refused, channelData.slice(0, 40)).toEqual({
        event: "pusher:subscription_error",
        channel: name,
        data: { type: "AuthError", error: expect.stringContaining("channel_data"), status: 403 },
      });
    }
    expect(await statsOf(`pusher:${name}`)).toMatchObject({ websockets: 0 });
    expect((await p.subscribe(name, auth)).event).toBe("pusher_internal:subscription_succeeded");
    p.ws.close();
  });

  it("above PRESENCE_ANNOUNCE_MAX the set is empty with its count, member events stop, subscription_count comes", {
    timeout: 60_000,
  }, async () => {
    const name = `presence-${uniq()}`;
    const members: PusherSocket[] = [];
    for (let i = 0; i < 20; i++) members.push((await joinPresence(name, `u${i}`))[0]);
    const first = members[0] as PusherSocket;
    await first.next(
      (e) =>
        e.event === "pusher_internal:member_added" &&
        dataOf(e) !== null &&
        (dataOf(e) as { user_id: string }).user_id === "u19",
    );
    const before = first.events.length;
    const [late, set] = await joinPresence(name, "u20");
    expect(set).toEqual({ presence: { ids: [], hash: {}, count: 21 } });
    // The size instead of member events, to every Pusher subscriber.
    const count = await first.next((e) => e.event === "pusher_internal:subscription_count", before);
    expect(dataOf(count)).toEqual({ subscription_count: 21 });
    expect(first.events.slice(before).filter((e) => e.event.startsWith("pusher_internal:member"))).toEqual([]);
    for (const m of [...members, late]) m.ws.close();
  });
});
