/**
 * The wait a test makes after its last closes, so the work they start ends inside the test: a relay
 * that sees a subscriber go tells its channel (the count report, answered `leave` when it is left
 * empty) and each client's connection ledger (src/relay/connection-holds.ts), each a call into
 * another object that runs after the close returns. A test that ends first leaves those calls to run
 * after its file ended, when the pool no longer loads modules for it (vitest's
 * `EnvironmentTeardownError: Closing rpc while "resolve" was pending`, test/vitest.config.ts).
 */
import { runInDurableObject } from "cloudflare:test";
import { env } from "cloudflare:workers";
import { isHostName } from "../../src/channel/relay-registry";
import { connectionLedgerStub, relayStub } from "../../src/platform/stubs";
import { channelObject, until, untilUnsubscribed } from "./helpers";

/** What a channel's registry holds (private in the object): each relay and the clients it holds. */
interface Registry {
  relays: {
    relays: {
      entries: Map<string, { clients: Map<string, number>; reservations: Map<string, { client: string }> }>;
    };
  };
}

/**
 * Each relay of `channel` (not a connection host), the clients it reported holding and those it has a
 * slot reserved for (a join it has not reported yet).
 */
async function relaysOf(channel: string): Promise<{ relay: string; reported: string[]; clients: string[] }[]> {
  return runInDurableObject(channelObject(channel), (instance) => {
    const out: { relay: string; reported: string[]; clients: string[] }[] = [];
    for (const [relay, e] of (instance as unknown as Registry).relays.relays.entries) {
      if (isHostName(relay)) continue;
      const reported = [...e.clients.keys()];
      const clients = new Set([...reported, ...[...e.reservations.values()].map((r) => r.client)]);
      out.push({ relay, reported, clients: [...clients] });
    }
    return out;
  });
}

/** Whether `client`'s connection ledger holds a statement of `relay`. */
function ledgerHears(client: string, relay: string): Promise<boolean> {
  return runInDurableObject(connectionLedgerStub(env, client), (l) =>
    (l as unknown as { holds: Map<string, unknown> }).holds.has(relay),
  );
}

/**
 * Runs `close` (a test's closes of the last subscribers of `channels`) and waits until what those
 * closes start has ended: every channel heard from its relays that no subscriber and no relay is left,
 * each relay got the channel's `leave` (it forgot the channel), and each client's connection ledger
 * dropped the relay's statement (the relay told it). Read before `close`, the channels' registries say
 * which relays and clients to wait for; a ledger is first waited for to hear the join a relay reported,
 * so the close's own statement is the one awaited after. Answers what `close` answered.
 */
export async function closeAndWaitTold<T>(channels: string | string[], close: () => T | Promise<T>): Promise<T> {
  const list = typeof channels === "string" ? [channels] : [...new Set(channels)];
  const held: { relay: string; reported: string[]; clients: string[] }[] = [];
  for (const channel of list) held.push(...(await relaysOf(channel)));
  for (const { relay, reported } of held) {
    for (const client of reported) await until(() => ledgerHears(client, relay), `${client}'s ledger to hear ${relay}`);
  }
  const closed = await close();
  await untilUnsubscribed(...list);
  for (const { relay, clients } of held) {
    await until(
      async () =>
        runInDurableObject(relayStub(env, relay), (r) => (r as unknown as { identity: unknown }).identity === null),
      `${relay} to leave its channel`,
    );
    for (const client of clients) {
      await until(async () => !(await ledgerHears(client, relay)), `${relay} to tell ${client}'s ledger`);
    }
  }
  return closed;
}
