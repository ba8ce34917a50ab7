/**
 * The Pusher protocol's pure parts (src/wire/pusher/): server frames are JSON of the shapes pusher-js
 * reads, client frames are read or refused with a reason, and the signatures match what the `pusher`
 * server library makes (vectors computed with pusher 5.3.4's `authorizeChannel` and `Token.sign`).
 */
import { describe, expect, it } from "vitest";
import { readChannelData, readClientFrame } from "../../src/wire/pusher/client-frames";
import {
  channelEvent,
  connectionEstablished,
  memberAdded,
  memberRemoved,
  presenceSet,
  pusherError,
  subscriptionCount,
  subscriptionError,
  subscriptionSucceeded,
} from "../../src/wire/pusher/frames";
import { channelAuth, channelAuthValid, httpApiProblem } from "../../src/wire/pusher/signatures";

const APP = { key: "test-key", secret: "test-pusher-secret-0123" };

describe("server frames", () => {
  it("connection_established carries socket_id and activity_timeout as a JSON string", () => {
    const f = JSON.parse(connectionEstablished("12.34", 120));
    expect(f.event).toBe("pusher:connection_established");
    expect(JSON.parse(f.data)).toEqual({ socket_id: "12.34", activity_timeout: 120 });
  });

  it("errors carry data as an object; internal and channel events as a string", () => {
    expect(JSON.parse(pusherError(4301, "slow down"))).toEqual({
      event: "pusher:error",
      data: { code: 4301, message: "slow down" },
    });
    expect(JSON.parse(subscriptionError("private-a", 401, "AuthError", "bad"))).toEqual({
      event: "pusher:subscription_error",
      channel: "private-a",
      data: { type: "AuthError", error: "bad", status: 401 },
    });
    expect(JSON.parse(subscriptionSucceeded("a"))).toEqual({
      event: "pusher_internal:subscription_succeeded",
      channel: "a",
      data: "{}",
    });
    expect(JSON.parse(channelEvent(JSON.stringify("a"), "ev", '{"x":"\\u2028"}', "u1"))).toEqual({
      event: "ev",
      channel: "a",
      data: '{"x":"\\u2028"}',
      user_id: "u1",
    });
    expect(JSON.parse(JSON.parse(memberAdded("presence-a", "u", '{"n":1}')).data)).toEqual({
      user_id: "u",
      user_info: { n: 1 },
    });
    expect(JSON.parse(JSON.parse(memberRemoved("presence-a", "u")).data)).toEqual({ user_id: "u" });
    expect(JSON.parse(JSON.parse(subscriptionCount("a", 7)).data)).toEqual({ subscription_count: 7 });
  });

  it("the presence set is {presence:{ids,hash,count}}", () => {
    expect(
      JSON.parse(
        presenceSet(
          [
            ["a", '{"n":1}'],
            ["b", null],
          ],
          2,
        ),
      ),
    ).toEqual({
      presence: { ids: ["a", "b"], hash: { a: { n: 1 }, b: null }, count: 2 },
    });
    expect(JSON.parse(presenceSet([], 25))).toEqual({ presence: { ids: [], hash: {}, count: 25 } });
  });
});

describe("client frames", () => {
  it("reads what pusher-js sends", () => {
    expect(readClientFrame('{"event":"pusher:ping","data":{}}')).toEqual({ kind: "ping" });
    expect(readClientFrame('{"event":"pusher:pong","data":"{}"}')).toEqual({ kind: "pong" });
    expect(
      readClientFrame('{"event":"pusher:subscribe","data":{"auth":"k:s","channel_data":"{}","channel":"presence-x"}}'),
    ).toEqual({ kind: "subscribe", channel: "presence-x", auth: "k:s", channelData: "{}" });
    expect(readClientFrame('{"event":"pusher:subscribe","data":{"channel":"x"}}')).toEqual({
      kind: "subscribe",
      channel: "x",
      auth: null,
      channelData: null,
    });
    // Some clients send data as JSON text.
    expect(readClientFrame('{"event":"pusher:unsubscribe","data":"{\\"channel\\":\\"x\\"}"}')).toEqual({
      kind: "unsubscribe",
      channel: "x",
    });
    expect(readClientFrame('{"event":"client-typing","data":{"a":1},"channel":"private-x"}')).toEqual({
      kind: "client-event",
      event: "client-typing",
      channel: "private-x",
      data: '{"a":1}',
    });
    expect(readClientFrame('{"event":"client-t","data":"as sent","channel":"private-x"}')).toMatchObject({
      data: "as sent",
    });
  });

  it.each([
    ["not json", "not JSON"],
    ["[1]", "not a JSON object"],
    ['{"data":{}}', '"event"'],
    ['{"event":"pusher:subscribe","data":{}}', "data.channel"],
    ['{"event":"pusher:subscribe","data":{"channel":""}}', "data.channel"],
    ['{"event":"pusher:subscribe","data":5}', "data.channel"],
    ['{"event":"pusher:subscribe","data":{"channel":"x","auth":5}}', "auth"],
    ['{"event":"client-x","data":{}}', "channel"],
    ['{"event":"client-x","channel":"p"}', "data"],
    ['{"event":"hello","data":{}}', "unknown event"],
    [`{"event":"client-${"x".repeat(200)}","channel":"p","data":1}`, "longer"],
  ])("refuses %s, saying why", (text, why) => {
    const f = readClientFrame(text);
    expect(f.kind).toBe("bad");
    expect((f as { message: string }).message).toContain(why);
  });

  it("channel_data: a user id (a number taken as text) and user_info up to the bound", () => {
    expect(readChannelData('{"user_id":"alice","user_info":{"name":"A"}}', 1024)).toEqual({
      userId: "alice",
      userInfo: '{"name":"A"}',
    });
    expect(readChannelData('{"user_id":42}', 1024)).toEqual({ userId: "42", userInfo: null });
    expect(readChannelData('{"user_id":""}', 1024)).toHaveProperty("problem");
    expect(readChannelData("nope", 1024)).toHaveProperty("problem");
    expect(readChannelData(JSON.stringify({ user_id: "a", user_info: "x".repeat(1100) }), 1024)).toHaveProperty(
      "problem",
    );
  });
});

describe("signatures", () => {
  it("channel authorizations match the pusher library's authorizeChannel", async () => {
    expect(await channelAuth(APP, "123.456", "private-room", null)).toBe(
      "test-key:9b9e537fa85ec9233b5035a2b7fc9bfeb276f71fb4259da4a560159d948ef081",
    );
    const data = '{"user_id":"alice","user_info":{"name":"Alice"}}';
    const good = "test-key:1b6e450ecc948e74727e73d7647d97c494a0251024cc8bedbda7c8bd5384ba16";
    expect(await channelAuthValid(APP, "123.456", "presence-room", data, good)).toBe(true);
    expect(await channelAuthValid(APP, "123.457", "presence-room", data, good)).toBe(false);
    expect(await channelAuthValid(APP, "123.456", "presence-room", data.replace("Alice", "Eve"), good)).toBe(false);
    expect(
      await channelAuthValid({ ...APP, secret: "another-secret-0123" }, "123.456", "presence-room", data, good),
    ).toBe(false);
    expect(await channelAuthValid(APP, "123.456", "presence-room", data, null)).toBe(false);
  });

  const body = '{"name":"ev","data":"{\\"a\\":1}","channels":["chat"]}';
  const query = (over: Record<string, string> = {}): [string, string][] =>
    Object.entries({
      auth_key: "test-key",
      auth_timestamp: "1700000000",
      auth_version: "1.0",
      body_md5: "520b22b735e3b6bd8e97dccf4a752ecf",
      auth_signature: "8c7aba5d9b438b3d37ca4f7ad0eba6f247814b79327832a37d9adf5c186155f2",
      ...over,
    });

  it("an HTTP API request signed by the pusher library passes", async () => {
    expect(await httpApiProblem(APP, "POST", "/apps/test-app/events", query(), body, 1_700_000_100)).toBeNull();
  });

  it.each([
    [{ auth_key: "other" }, body, 1_700_000_100, "auth_key"],
    [{}, body, 1_700_000_601, "auth_timestamp"],
    [{}, body, 1_699_999_399, "auth_timestamp"],
    [{ auth_version: "2.0" }, body, 1_700_000_000, "auth_version"],
    [{}, `${body} `, 1_700_000_000, "body_md5"],
    [{ auth_signature: "0".repeat(64) }, body, 1_700_000_000, "auth_signature"],
    [{ extra: "1" }, body, 1_700_000_000, "auth_signature"],
  ])("refuses %j (now %s)", async (over, text, now, why) => {
    expect(await httpApiProblem(APP, "POST", "/apps/test-app/events", query(over), text, now)).toContain(why);
  });

  it("a wrong secret never passes", async () => {
    expect(
      await httpApiProblem(
        { ...APP, secret: "another-secret-0123" },
        "POST",
        "/apps/test-app/events",
        query(),
        body,
        1_700_000_000,
      ),
    ).toContain("auth_signature");
  });
});
