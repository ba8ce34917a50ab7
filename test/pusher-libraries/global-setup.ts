/**
 * The libraries project's Floodgate (test/vitest.config.ts): the Worker bundled and started in its own
 * workerd through Miniflare's API (scripts/lib/workerd.mjs, as the benchmarks and the client package
 * test start it), with the Pusher door open, for the whole run; the tests reach it over real sockets.
 */
import type { TestProject } from "vitest/node";
// @ts-expect-error: a script module of the repository, plain JavaScript
import { startFloodgate } from "../../scripts/lib/workerd.mjs";

export const PUSHER = { appId: "lib-app", key: "lib-key", secret: "lib-pusher-secret-0123" };

declare module "vitest" {
  export interface ProvidedContext {
    floodgate: { base: string; admin: string };
  }
}

/**
 * A Floodgate in its own workerd with the Pusher door open for these tests, and `vars` over its
 * configuration: the run's (below), or a test file's own with small limits. `viaEntry`: requests pass
 * through Miniflare's entry Worker, which sets `request.cf` from an `MF-CF-Blob` header (a continent
 * for a test of continent shards; without the header, Miniflare's placeholder, continent `NA`).
 */
export async function pusherFloodgate(
  vars: Record<string, string> = {},
  { viaEntry = false }: { viaEntry?: boolean } = {},
): Promise<{ base: string; admin: string; stop(): Promise<void> }> {
  return await startFloodgate(
    {
      PUSHER_APP_ID: PUSHER.appId,
      PUSHER_APP_KEY: PUSHER.key,
      PUSHER_APP_SECRET: PUSHER.secret,
      // Every connection here comes from one address: its read budget (the connect and each public
      // subscribe take one) must not be what a test meets.
      READ_RATE: "1000/s",
      READ_BURST: "1000",
      ...vars,
    },
    undefined,
    { viaEntry },
  );
}

export default async function setup(project: TestProject): Promise<() => Promise<void>> {
  // Every connection of the run comes from this machine, one client: the files run side by side.
  const worker = await pusherFloodgate({ MAX_CONNECTIONS_PER_CLIENT: "1000" });
  project.provide("floodgate", { base: worker.base, admin: worker.admin });
  return () => worker.stop();
}
