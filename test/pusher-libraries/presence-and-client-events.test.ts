/**
 * pusher-js's presence channels and client events against Floodgate (docs/api.md, "The Pusher door"):
 * members as pusher-js keeps them (me, count, member_added / member_removed with user_info), client
 * events that reach the others, never the sender, with `user_id` on presence, and the 4301 a client
 * past PUSHER_CLIENT_EVENTS_RATE gets.
 */
import { afterEach, describe, expect, it } from "vitest";
import { backendAuthorization, client, subscribed, uniq, until } from "./floodgate";

const clients: { disconnect(): void }[] = [];
afterEach(() => {
  for (const c of clients.splice(0)) c.disconnect();
});

function member(id: string) {
  return client({
    channelAuthorization: backendAuthorization(() => ({ user_id: id, user_info: { name: id.toUpperCase() } })),
  });
}

describe("presence with pusher-js", () => {
  it("keeps members: me, count, member_added with user_info, member_removed", async () => {
    const name = `presence-${uniq()}`;
    const [a, b] = [member("ann"), member("bob")];
    clients.push(a, b);
    const ca = (await subscribed(a, name)) as unknown as {
      members: { count: number; me: { id: string; info: unknown }; get(id: string): { info: unknown } | null };
      bind(e: string, f: (m: { id: string; info: unknown }) => void): void;
    };
    expect(ca.members.count).toBe(1);
    expect(ca.members.me).toEqual({ id: "ann", info: { name: "ANN" } });
    const added: { id: string; info: unknown }[] = [];
    const removed: string[] = [];
    ca.bind("pusher:member_added", (m) => added.push(m));
    ca.bind("pusher:member_removed", (m) => removed.push(m.id));
    await subscribed(b, name);
    await until(() => added.length === 1, "member_added");
    expect(added).toEqual([{ id: "bob", info: { name: "BOB" } }]);
    expect(ca.members.count).toBe(2);
    b.disconnect();
    await until(() => removed.length === 1, "member_removed");
    expect(removed).toEqual(["bob"]);
    expect(ca.members.count).toBe(1);
  });
});

describe("client events with pusher-js", () => {
  it("reach the others with user_id on presence, never the sender", async () => {
    const name = `presence-${uniq()}`;
    const [a, b] = [member("ann"), member("bob")];
    clients.push(a, b);
    const [ca, cb] = [await subscribed(a, name), await subscribed(b, name)];
    const atA: unknown[] = [];
    const atB: [unknown, unknown][] = [];
    ca.bind("client-typing", (d: unknown) => atA.push(d));
    cb.bind("client-typing", (d: unknown, meta: { user_id?: string }) => atB.push([d, meta?.user_id]));
    expect(ca.trigger("client-typing", { on: true })).toBe(true);
    await until(() => atB.length === 1, "the client event");
    expect(atB).toEqual([[{ on: true }, "ann"]]);
    // bob answers; ann gets his, and never her own.
    cb.trigger("client-typing", { on: false });
    await until(() => atA.length === 1, "bob's client event");
    expect(atA).toEqual([{ on: false }]);
  });

  it("data over MAX_MESSAGE_BYTES, or stored over twice it: pusher:error 4300, not delivered; data of MAX_MESSAGE_BYTES all quotes is", async () => {
    const name = `private-${uniq()}`;
    const [a, b] = [
      client({ channelAuthorization: backendAuthorization() }),
      client({ channelAuthorization: backendAuthorization() }),
    ];
    clients.push(a, b);
    const [ca, cb] = [await subscribed(a, name), await subscribed(b, name)];
    const errors: number[] = [];
    a.connection.bind("error", (e: { data?: { code?: number } }) => {
      if (e.data?.code) errors.push(e.data.code);
    });
    const got: unknown[] = [];
    cb.bind("client-big", (d: unknown) => got.push(d));
    // One byte over; 12,000 control characters (72,000 bytes escaped, \u0001, over 2 × 32,768 + 622
    // stored); then 32,768 quotes, 65,536 bytes escaped in the frame and the stored body alike.
    const fits = '"'.repeat(32_768);
    ca.trigger("client-big", "x".repeat(32_769));
    ca.trigger("client-big", "\u0001".repeat(12_000));
    ca.trigger("client-big", fits);
    ca.trigger("client-big", "small");
    await until(() => errors.length === 2 && got.length === 2, "the refusals and the two events that fit");
    expect(errors).toEqual([4300, 4300]);
    expect(got).toEqual([fits, "small"]);
  });

  it("past PUSHER_CLIENT_EVENTS_RATE the sender gets pusher:error 4301 and the rest are not delivered", async () => {
    const name = `private-${uniq()}`;
    const [a, b] = [
      client({ channelAuthorization: backendAuthorization() }),
      client({ channelAuthorization: backendAuthorization() }),
    ];
    clients.push(a, b);
    const [ca, cb] = [await subscribed(a, name), await subscribed(b, name)];
    const errors: number[] = [];
    a.connection.bind("error", (e: { data?: { code?: number } }) => {
      if (e.data?.code) errors.push(e.data.code);
    });
    const got: number[] = [];
    cb.bind("client-n", (d: { i: number }) => got.push(d.i));
    const sent = 30;
    for (let i = 0; i < sent; i++) ca.trigger("client-n", { i });
    await until(() => errors.length > 0 && got.length + errors.length === sent, "every event delivered or refused");
    expect(new Set(errors)).toEqual(new Set([4301]));
    expect(got.length).toBeGreaterThanOrEqual(10);
    expect(got).toEqual([...got].sort((x, y) => x - y));
  });
});
