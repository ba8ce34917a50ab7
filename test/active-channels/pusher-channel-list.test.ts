/**
 * The list of occupied Pusher channels (`GET /apps/{id}/channels`) is bounded, public channels and
 * private-or-presence ones apart: public names anyone can occupy by the thousand never keep the app's
 * presence channels out of a `presence-` listing. A sharded channel's shards note rows of their own
 * and are listed as their one channel. Each test has a registry object of its own.
 */

import { runInDurableObject } from "cloudflare:test";
import { env } from "cloudflare:workers";
import { describe, expect, it } from "vitest";
import type { ActiveChannels } from "../../src/active-channels/active-channels";
import { PUSHER_CHANNELS_KEPT } from "../../src/active-channels/pusher-channels";
import { uniq } from "../support/helpers";

function ownRegistry(): DurableObjectStub<ActiveChannels> {
  return env.ACTIVE_CHANNELS.get(env.ACTIVE_CHANNELS.idFromName(uniq("registry")));
}

describe("the occupied Pusher channels", () => {
  it(`keeps at most ${PUSHER_CHANNELS_KEPT} public ones; a full public list never keeps a presence channel out`, async () => {
    const registry = ownRegistry();
    const listed = await runInDurableObject(registry, (instance) => {
      for (let i = 0; i < PUSHER_CHANNELS_KEPT + 50; i++) instance.notePusherChannel(`pusher:flood-${i}`, 1, 0);
      instance.notePusherChannel("pusher:presence-room", 2, 2);
      instance.notePusherChannel("pusher:private-orders", 1, 0);
      return {
        publicOnes: instance.pusherChannels("pusher:flood-", 1_000_000).length,
        presence: instance.pusherChannels("pusher:presence-", 1000),
        priv: instance.pusherChannels("pusher:private-", 1000),
      };
    });
    expect(listed.publicOnes).toBe(PUSHER_CHANNELS_KEPT);
    expect(listed.presence).toEqual([{ channel: "pusher:presence-room", users: 2 }]);
    expect(listed.priv).toEqual([{ channel: "pusher:private-orders", users: 0 }]);
    // A public channel that leaves makes room for the next; one already listed is updated in place.
    const after = await runInDurableObject(registry, (instance) => {
      instance.notePusherChannel("pusher:late", 1, 0);
      const before = instance.pusherChannels("pusher:late", 10).length;
      instance.notePusherChannel("pusher:flood-0", 0, 0);
      instance.notePusherChannel("pusher:late", 1, 0);
      return [before, instance.pusherChannels("pusher:late", 10).length];
    });
    expect(after).toEqual([0, 1]);
  });

  it(`keeps at most ${PUSHER_CHANNELS_KEPT} private and presence ones`, async () => {
    const registry = ownRegistry();
    const counts = await runInDurableObject(registry, (instance) => {
      for (let i = 0; i < PUSHER_CHANNELS_KEPT / 2; i++) {
        instance.notePusherChannel(`pusher:private-${i}`, 1, 0);
        instance.notePusherChannel(`pusher:presence-${i}`, 1, 1);
      }
      instance.notePusherChannel("pusher:presence-one-more", 1, 1);
      instance.notePusherChannel("pusher:public-still", 1, 0);
      return {
        privateOnes:
          instance.pusherChannels("pusher:private-", 1_000_000).length +
          instance.pusherChannels("pusher:presence-", 1_000_000).length,
        public: instance.pusherChannels("pusher:public-", 10).length,
      };
    });
    expect(counts).toEqual({ privateOnes: PUSHER_CHANNELS_KEPT, public: 1 });
  });

  it("lists a sharded channel once, its shards' members added up; the limit counts channels", async () => {
    const listed = await runInDurableObject(ownRegistry(), (instance) => {
      instance.notePusherChannel("pusher:presence-geo.x#EU", 2, 2);
      instance.notePusherChannel("pusher:presence-geo.x#AS", 3, 3);
      // The channel's own object: a subscriber from before the rule sharded it.
      instance.notePusherChannel("pusher:presence-geo.x", 1, 1);
      instance.notePusherChannel("pusher:presence-geo.xy#EU", 1, 1);
      return {
        all: instance.pusherChannels("pusher:presence-geo.", 1000),
        first: instance.pusherChannels("pusher:presence-geo.", 1),
        // A prefix names channels, never a shard's key.
        shardPrefix: instance.pusherChannels("pusher:presence-geo.x#", 1000),
      };
    });
    expect(listed.all).toEqual([
      { channel: "pusher:presence-geo.x", users: 6 },
      { channel: "pusher:presence-geo.xy", users: 1 },
    ]);
    expect(listed.first).toEqual([{ channel: "pusher:presence-geo.x", users: 6 }]);
    expect(listed.shardPrefix).toEqual([]);
  });
});
