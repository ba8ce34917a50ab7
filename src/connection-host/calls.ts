/**
 * What a connection host (./connection-host.ts) takes from the Worker: one Pusher connection, already
 * checked (key, protocol, budget) and placed by its group's directory (src/host-directory/). A
 * request, since a WebSocket upgrade cannot travel by RPC, encoded and decoded here on both sides.
 * The channel's deliveries come by RPC (`deliver`), and the host reports to each channel as a relay
 * does (src/relay/calls.ts).
 */

export interface HostConnect {
  /** This host's name and place (src/host-directory/naming.ts). */
  host: string;
  group: string;
  k: number;
  /** The directory's slot for this connection, confirmed by the host's next report. */
  reservation: string;
  /** Whose connection it is (src/channel/client-cap.ts `clientKey`: its IP, IPv6 per /64). */
  client: string;
  /** The lease its client's connection ledger gave it (src/connection-ledger/), confirmed by the host. */
  lease: string;
  /** The request's continent (`request.cf.continent`), for channels sharded by continent; null: none. */
  continent: string | null;
  /** Most connections one host holds (`RELAY_CAPACITY`). */
  capacity: number;
  /**
   * Public reads only: a page on an origin `CORS_ORIGINS` admits only under `*`
   * (src/worker/http/cors.ts `publicReadsOnly`); its private and presence subscribes are refused.
   */
  publicOnly: boolean;
}

const CONNECT_URL = "https://host.internal/connect";

/** The request the Worker sends the host for `c`, carrying the client's own (for its upgrade). */
export function hostConnectRequest(c: HostConnect, original: Request): Request {
  const url = new URL(CONNECT_URL);
  const q = url.searchParams;
  q.set("host", c.host);
  q.set("group", c.group);
  q.set("k", String(c.k));
  q.set("reservation", c.reservation);
  q.set("client", c.client);
  q.set("lease", c.lease);
  if (c.continent !== null) q.set("continent", c.continent);
  q.set("capacity", String(c.capacity));
  if (c.publicOnly) q.set("public_only", "1");
  return new Request(url, original);
}

/** The connection a {@link hostConnectRequest} carries. */
export function readHostConnect(request: Request): HostConnect {
  const q = new URL(request.url).searchParams;
  return {
    host: q.get("host") ?? "",
    group: q.get("group") ?? "",
    k: Number(q.get("k")),
    reservation: q.get("reservation") ?? "",
    client: q.get("client") ?? "",
    lease: q.get("lease") ?? "",
    continent: q.get("continent"),
    capacity: Number(q.get("capacity")),
    publicOnly: q.get("public_only") === "1",
  };
}

/** A host already holding `capacity` connections answers this; the Worker closes the connection with 4100. */
export const HOST_FULL_STATUS = 503;
