/**
 * The one file that reaches into a connection host's internals (src/connection-host/), as
 * channel-internals.ts does for channel objects: the tests that must move a host's clock.
 */
import { evictDurableObject, runInDurableObject } from "cloudflare:test";
import { env } from "cloudflare:workers";
import type { ConnectionHost } from "../../src/connection-host/connection-host";
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

/**
 * Evicts the host holding the connection `socketId` (its sockets hibernate, and a new instance reads
 * each one's attachment); false when no host of this machine's group holds it.
 */
export async function evictHostOf(socketId: string): Promise<boolean> {
  for (const host of await hostsWithConnections()) {
    const stub = connectionHostStub(env, host);
    const holds = await runInDurableObject(stub, (_instance: ConnectionHost, state) =>
      state.getWebSockets().some((ws) => (ws.deserializeAttachment() as { id?: string } | null)?.id === socketId),
    );
    if (!holds) continue;
    await evictDurableObject(stub);
    return true;
  }
  return false;
}
