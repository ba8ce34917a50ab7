/**
 * Event names only the server sends (docs/api.md, "The Pusher door"): `pusher:…`, `pusher_internal:…`
 * and `floodgate:…` are refused on every door an app or a token publishes through — the HTTP API's
 * events and batches (400, Pusher's short text) and the native publish to `pusher:N` (400
 * `invalid_argument`) — with nothing published and nothing reaching a Pusher connection.
 */
import { afterEach, describe, expect, it } from "vitest";
import { historyOf, mint, publishTo, uniq } from "../../support/helpers";
import { APP, authFor, closePushers, openPusher, signedApiCall } from "../../support/pusher";

afterEach(closePushers);

const RESERVED = [
  "pusher_internal:member_added",
  "pusher:error",
  "pusher_internal:subscription_count",
  "floodgate:summary",
];

async function token(): Promise<string> {
  return (await mint({ sub: uniq("p"), channels: ["pusher:**"], scopes: ["publish", "subscribe"], rl: "1000/s" }))
    .access_token;
}

describe("reserved event names", () => {
  it("the HTTP API refuses them (events and batches) with 400 and publishes nothing", async () => {
    const name = `presence-${uniq()}`;
    const p = await openPusher();
    await p.subscribe(name, await authFor(p, name, { user_id: "u1" }));
    for (const event of RESERVED) {
      const data = JSON.stringify({ user_id: "ghost" });
      const one = await signedApiCall("POST", `/apps/${APP.id}/events`, {}, { name: event, data, channels: [name] });
      expect(one.status, event).toBe(400);
      expect(one.headers.get("content-type")).toContain("text/plain");
      expect(await one.text()).toContain("reserved");
      const batch = {
        batch: [
          { channel: name, name: "fine", data: "1" },
          { channel: name, name: event, data },
        ],
      };
      expect((await signedApiCall("POST", `/apps/${APP.id}/batch_events`, {}, batch)).status, event).toBe(400);
    }
    // A name that only looks alike is an app's own event.
    const own = await signedApiCall(
      "POST",
      `/apps/${APP.id}/events`,
      {},
      { name: "pusher-ish", data: "1", channels: [name] },
    );
    expect(own.status).toBe(200);
    await p.next((e) => e.event === "pusher-ish");
    expect(p.events.filter((e) => RESERVED.includes(e.event))).toEqual([]);
    expect((await historyOf(`pusher:${name}`, await token())).map((m) => (m.data as { event: string }).event)).toEqual([
      "pusher-ish",
    ]);
  });

  it("a native publish to pusher:N refuses them with 400 invalid_argument", async () => {
    const t = await token();
    const name = uniq("native-");
    const p = await openPusher();
    await p.subscribe(name);
    for (const event of RESERVED) {
      const res = await publishTo(`pusher:${name}`, t, { event, data: "{}" });
      expect(res.status, event).toBe(400);
      const body = (await res.json()) as { code: string; msg: string; meta: { code: string } };
      expect(body).toMatchObject({ code: "invalid_argument", meta: { code: "INVALID_ARGUMENT" } });
      expect(body.msg).toContain("reserved");
    }
    expect((await publishTo(`pusher:${name}`, t, { event: "ok", data: "{}" })).status).toBe(200);
    await p.next((e) => e.event === "ok");
    expect(p.events.filter((e) => RESERVED.includes(e.event))).toEqual([]);
    expect(await historyOf(`pusher:${name}`, t)).toHaveLength(1);
  });
});
