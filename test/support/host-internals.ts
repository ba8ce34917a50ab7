/**
 * The one file that reaches into a connection host's internals (src/connection-host/), as
 * channel-internals.ts does for channel objects: the tests that must move a host's clock.
 */
import { evictDurableObject, runInDurableObject } from "cloudflare:test";
import { env } from "cloudflare:workers";
import { ClientEvents, type EventingHost } from "../../src/connection-host/client-events";
import type { ConnectionHost } from "../../src/connection-host/connection-host";
import type { ConnectionAttachment } from "../../src/connection-host/connections";
import { connectionHostStub, hostDirectoryStub } from "../../src/platform/stubs";

/** The hosts of this machine's placement group with a connection now. */
export async function hostsWithConnections(): Promise<string[]> {
  const hosts = await hostDirectoryStub(env, "hosts:local").hostsNow();
  return hosts.filter((h) => h.connections > 0).map((h) => h.host);
}

/** Runs a host's liveness check as if it were `now` (src/connection-host/liveness.ts). */
export async function livenessAt(host: string, now: number): Promise<void> {
  await runInDurableObject(connectionHostStub(env, host), (instance: ConnectionHost) => {
    (instance as unknown as { liveness: { tick(now: number): void } }).liveness.tick(now);
  });
}

/** The socket of the connection `socketId` among a host's, with its stored attachment; null when it holds none. */
function socketOf(
  state: DurableObjectState,
  socketId: string,
): { ws: WebSocket; attachment: ConnectionAttachment } | null {
  for (const ws of state.getWebSockets()) {
    const attachment = ws.deserializeAttachment() as ConnectionAttachment | null;
    if (attachment?.id === socketId) return { ws, attachment };
  }
  return null;
}

/** The host holding the connection `socketId`, or null when no host of this machine's group holds it. */
export async function hostOf(socketId: string): Promise<string | null> {
  for (const host of await hostsWithConnections()) {
    const holds = await runInDurableObject(
      connectionHostStub(env, host),
      (_instance: ConnectionHost, state) => socketOf(state, socketId) !== null,
    );
    if (holds) return host;
  }
  return null;
}

/**
 * Evicts the host holding the connection `socketId` (its sockets hibernate, and a new instance reads
 * each one's attachment); false when no host of this machine's group holds it.
 */
export async function evictHostOf(socketId: string): Promise<boolean> {
  const host = await hostOf(socketId);
  if (host === null) return false;
  await evictDurableObject(connectionHostStub(env, host));
  return true;
}

/** The stored attachment of the connection `socketId` (src/connection-host/connections.ts), as its host reads it. */
export async function attachmentOf(socketId: string): Promise<ConnectionAttachment | null> {
  const host = await hostOf(socketId);
  if (host === null) return null;
  return await runInDurableObject(
    connectionHostStub(env, host),
    (_instance: ConnectionHost, state) => socketOf(state, socketId)?.attachment ?? null,
  );
}

/** Rewrites the stored attachment of the connection `socketId` with `edit` (as an earlier write would have left it). */
export async function editAttachmentOf(
  socketId: string,
  edit: (a: ConnectionAttachment) => ConnectionAttachment,
): Promise<void> {
  const host = await hostOf(socketId);
  if (host === null) throw new Error(`no host holds ${socketId}`);
  await runInDurableObject(connectionHostStub(env, host), (_instance: ConnectionHost, state) => {
    const found = socketOf(state, socketId);
    if (found) found.ws.serializeAttachment(edit(found.attachment));
  });
}

/**
 * Lets `host` open only `more` lanes beyond those it has or is opening (src/connection-host/lane-room.ts):
 * the bound of 10,000 reached with a few channels. With `absolute`, its most is `more` itself (to put
 * the shipped bound back).
 */
export async function leaveLaneRoom(host: string, more: number, { absolute = false } = {}): Promise<void> {
  await runInDurableObject(connectionHostStub(env, host), (instance: ConnectionHost) => {
    const room = (instance as unknown as { lanes: { room: { max: number; used: number } } }).lanes.room;
    room.max = absolute ? more : room.used + more;
  });
}

/** The connections `host`'s lanes count as beyond its own, as its directory stored them. */
export async function laneLoadInDirectory(host: string): Promise<number> {
  return await runInDurableObject(hostDirectoryStub(env, "hosts:local"), (_instance, state) => {
    const rows = state.storage.sql.exec<{ lane_load: number }>("SELECT lane_load FROM hosts WHERE name = ?", host);
    return rows.toArray()[0]?.lane_load ?? 0;
  });
}

/**
 * Runs a client event of the connection `socketId` through its host's own client-event path, but read
 * with the settings of `configured` (an object's env is the test run's: this is how a test sees a
 * host configured otherwise, a Pusher-named ANALYTICS_CHANNEL say). The connection hears the outcome.
 */
export async function clientEventConfigured(
  socketId: string,
  configured: Env,
  event: string,
  channel: string,
  data: string,
): Promise<void> {
  const host = await hostOf(socketId);
  if (host === null) throw new Error(`no host holds ${socketId}`);
  await runInDurableObject(connectionHostStub(env, host), async (instance: ConnectionHost, state) => {
    const own = (instance as unknown as { clientEvents: { host: EventingHost } }).clientEvents.host;
    const found = socketOf(state, socketId);
    if (!found) throw new Error(`${host} no longer holds ${socketId}`);
    await new ClientEvents(state, configured, own).publish(found.ws, event, channel, data);
  });
}
