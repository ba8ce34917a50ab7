/**
 * `GET /app/{key}?protocol=7` (docs/api.md, "The Pusher door"): a Pusher connection. Checked in
 * order — a WebSocket upgrade (else 400), the app key (a wrong one, or the door closed: `pusher:error`
 * 4001 and close 4001), the protocol (5 to 7, else 4007), the client IP's read budget (429 before any
 * upgrade, as a subscribe without a token; so is each subscribe on it without a signature that verifies,
 * src/connection-host/host-reads.ts) — then placed by its placement group's directory
 * (src/host-directory/) on a connection host, which takes the upgrade and holds it
 * (src/connection-host/). A host already full closes it with 4100, and so does a client that holds
 * `MAX_CONNECTIONS_PER_CLIENT` connections already (src/worker/gate/connections.ts): it backs off and retries.
 * A page on an origin `CORS_ORIGINS` admits only under `*` gets a connection marked public reads only,
 * kept with it by its host (src/worker/http/cors.ts).
 */
import { Hono } from "hono";
import * as z from "zod";
import { clientKey } from "../../channel/client-cap";
import { HOST_FULL_STATUS, hostConnectRequest } from "../../connection-host/calls";
import { directoryName } from "../../host-directory/naming";
import { readBudget } from "../../limiter/budgets";
import { HOST_FULL_REASON } from "../../metrics/series";
import { connectionHostStub, hostDirectoryStub } from "../../platform/stubs";
import { placementGroup } from "../../relay/placement";
import { CONTINENTS } from "../../settings/shards";
import { invalidArgument } from "../../wire/errors";
import { PUSHER_APP_CLOSED, PUSHER_OVER_CAPACITY, PUSHER_UNSUPPORTED_PROTOCOL } from "../../wire/pusher/codes";
import { pusherError } from "../../wire/pusher/frames";
import type { AppEnv } from "../app-env";
import { leaseConnection, releaseConnection } from "../gate/connections";
import { publicReadsOnly } from "../http/cors";
import { orUnavailable } from "../http/errors";
import { documented, errors, route } from "../http/openapi";
import { clientIp } from "../http/params";

export const pusherConnect = new Hono<AppEnv>();

/** The protocol versions the door speaks (Pusher's 7, and 5 and 6, which differ in nothing it uses). */
const PROTOCOLS = new Set(["5", "6", "7"]);

const connectRoute = route({
  method: "get",
  path: "/{key}",
  summary: "Connect with the Pusher Channels protocol (WebSocket)",
  description:
    'pusher-js, Laravel Echo and the Pusher mobile SDKs connect here (docs/api.md, "The Pusher door"). Upgrades to a ' +
    'WebSocket that first sends `{"event":"pusher:connection_established","data":"{\\"socket_id\\":…,\\"activity_timeout\\":…}"}`, ' +
    "then takes `pusher:subscribe`, `pusher:unsubscribe`, `pusher:ping` and client events, up to 100 channels at once. " +
    "A wrong key or a closed door: `pusher:error` 4001 and close 4001; a protocol other than 5–7: 4007; no room: 4100; the client (its IP, IPv6 " +
    "per /64) already holding `MAX_CONNECTIONS_PER_CLIENT` open subscriptions and Pusher connections over all channels: " +
    "4100 too. " +
    "Charged to the client IP's read budget (429 before the upgrade), as is each `pusher:subscribe` without a " +
    "signature that verifies (`pusher:subscription_error` 429). From a page on an origin that `CORS_ORIGINS` " +
    "does not list: 403 before upgrading, or under `*` a connection for public channels only (a private or presence " +
    "subscribe is `pusher:subscription_error` 403).",
  request: {
    params: z.object({
      key: z.string().openapi({ param: { name: "key", in: "path" }, description: "PUSHER_APP_KEY." }),
    }),
    query: z.object({
      protocol: z.string().openapi({ example: "7" }),
      client: z.string().optional().openapi({ example: "js" }),
      version: z.string().optional().openapi({ example: "8.6.0" }),
    }),
  },
  responses: { 101: { description: "The Pusher WebSocket." }, ...errors(400, 403, 429, 500, 503) },
});

pusherConnect.get(documented(pusherConnect, connectRoute), async (c) => {
  const svc = c.get("svc");
  if ((c.req.header("upgrade") ?? "").toLowerCase() !== "websocket") {
    throw invalidArgument("GET /app/{key} upgrades to a Pusher WebSocket (Upgrade: websocket)");
  }
  const app = svc.config.pusher.app;
  const count = (code: number) =>
    svc.metrics.inc("floodgate_pusher_errors_total", { kind: "error", code: String(code) });
  if (!app || c.req.param("key") !== app.key) {
    count(PUSHER_APP_CLOSED);
    return refusedSocket(PUSHER_APP_CLOSED, app ? "App key not in this cluster" : "The Pusher door is closed");
  }
  if (!PROTOCOLS.has(c.req.query("protocol") ?? "")) {
    count(PUSHER_UNSUPPORTED_PROTOCOL);
    return refusedSocket(PUSHER_UNSUPPORTED_PROTOCOL, "Unsupported protocol version: use 7");
  }
  const ip = clientIp(c.req.raw);
  const budget = readBudget(svc.config, ip);
  const limitHeaders = await svc.gate.check("read", budget.key, budget.limit, c.var.defer);
  const client = clientKey(null, ip);
  // The client's connections over all channels (MAX_CONNECTIONS_PER_CLIENT): past it, close 4100.
  const lease = await leaseConnection(c.env, client, svc.config.maxConnectionsPerClient);
  if (lease === null) {
    count(PUSHER_OVER_CAPACITY);
    svc.metrics.inc("floodgate_refusals_total", { reason: "connections" });
    return refusedSocket(PUSHER_OVER_CAPACITY, "Over capacity: too many connections for one client; retry later");
  }
  const publicOnly = publicReadsOnly(svc.config.cors, c.req.header("origin"));
  const group = placementGroup(c.req.raw);
  const capacity = svc.config.relayCapacity;
  const res = await orUnavailable("connection host", async () => {
    const place = await hostDirectoryStub(c.env, directoryName(group)).place(group, capacity);
    return await connectionHostStub(c.env, place.host).fetch(
      hostConnectRequest(
        { ...place, client, lease, continent: continentOf(c.req.raw), capacity, publicOnly },
        c.req.raw,
      ),
    );
  }).catch((e: unknown) => {
    c.var.defer(releaseConnection(c.env, client, lease));
    throw e;
  });
  if (res.status === HOST_FULL_STATUS || !res.webSocket) {
    c.var.defer(releaseConnection(c.env, client, lease));
    count(PUSHER_OVER_CAPACITY);
    // A 101 is no refusal to the count by answers (src/worker/http/refusals.ts), so it is counted here:
    // a host full already (its directory placed by a count behind the host's), or any other answer
    // without a socket, a host that failed.
    const reason = res.status === HOST_FULL_STATUS ? HOST_FULL_REASON : "unavailable";
    svc.metrics.inc("floodgate_refusals_total", { reason });
    return refusedSocket(PUSHER_OVER_CAPACITY, "Over capacity: retry later");
  }
  return new Response(null, { status: 101, webSocket: res.webSocket, headers: limitHeaders });
});

/** A WebSocket that says why it is refused, in Pusher's way, and closes with that code. */
function refusedSocket(code: number, message: string): Response {
  const pair = new WebSocketPair();
  const [client, server] = [pair[0], pair[1]];
  server.accept();
  server.send(pusherError(code, message));
  server.close(code, message);
  return new Response(null, { status: 101, webSocket: client });
}

/** The request's continent (`request.cf.continent`), for channels sharded by continent; null: none. */
function continentOf(request: Request): string | null {
  const c = (request as { cf?: { continent?: unknown } }).cf?.continent;
  return typeof c === "string" && CONTINENTS.includes(c) ? c : null;
}
