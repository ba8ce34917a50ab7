/**
 * HostDirectory — one Durable Object per placement group (`hosts:{group}`, ./naming.ts): which
 * connection host (src/connection-host/) takes a new Pusher connection. The same registry a channel
 * keeps of its relays (src/channel/relay-registry.ts) with hosts for relays and connections for
 * subscribers: the host with the lowest k that has room (`RELAY_CAPACITY` connections), a slot
 * reserved at once so concurrent connects cannot overfill one, and a new host only when every host of
 * the group is full. Each host reports its connections after every change (src/relay/reporter.ts, as
 * a relay reports to its channel); a host reported empty with no slot reserved leaves. A host's lanes
 * count too (src/connection-host/lane-room.ts): a host that serves its most channels is full here
 * whatever its connections, reported in the registry's `sse` (a host has no SSE), which the
 * registry adds to `websockets` when it places.
 *
 * Bounded: one entry per host, each holding at most `RELAY_CAPACITY` connections. Stored in its
 * SQLite table, so a restarted directory still knows how full each host is.
 */
import { DurableObject } from "cloudflare:workers";
import { type RelayEntry, RelayRegistry, UNBOUNDED } from "../channel/relay-registry";
import type { RelayReport, RelayReportAnswer } from "../relay/calls";
import { hostName } from "./naming";

/** A place for one connection: a host, and the reservation its report confirms. */
export type HostPlace = { host: string; group: string; k: number; reservation: string };

interface HostRow {
  [key: string]: SqlStorageValue;
  name: string;
  grp: string;
  k: number;
  connections: number;
  /** The connections a host's lanes count as beyond its own (the registry's `sse`). */
  lane_load: number;
}

export class HostDirectory extends DurableObject<Env> {
  private readonly sql: SqlStorage;
  private readonly hosts: RelayRegistry;

  constructor(ctx: DurableObjectState, env: Env) {
    super(ctx, env);
    this.sql = ctx.storage.sql;
    this.sql.exec(
      "CREATE TABLE IF NOT EXISTS hosts (name TEXT PRIMARY KEY, grp TEXT NOT NULL, k INTEGER NOT NULL, connections INTEGER NOT NULL, lane_load INTEGER NOT NULL DEFAULT 0)",
    );
    // A directory an older version made: its hosts had no lane load.
    const columns = this.sql.exec<{ name: string }>("SELECT name FROM pragma_table_info('hosts')").toArray();
    if (!columns.some((c) => c.name === "lane_load"))
      this.sql.exec("ALTER TABLE hosts ADD COLUMN lane_load INTEGER NOT NULL DEFAULT 0");
    this.hosts = new RelayRegistry(
      {
        save: (e: RelayEntry) =>
          this.sql.exec(
            "INSERT OR REPLACE INTO hosts (name, grp, k, connections, lane_load) VALUES (?, ?, ?, ?, ?)",
            e.name,
            e.group,
            e.k,
            e.websockets,
            e.sse,
          ),
        remove: (name) => this.sql.exec("DELETE FROM hosts WHERE name = ?", name),
      },
      hostName,
      () => true,
    );
    this.hosts.load(
      this.sql
        .exec<HostRow>("SELECT name, grp, k, connections, lane_load FROM hosts")
        .toArray()
        .map((r) => ({
          name: r.name,
          group: r.grp,
          k: r.k,
          websockets: r.connections,
          sse: r.lane_load,
          clients: new Map(),
        })),
    );
  }

  /** A place on a host of `group` with fewer than `capacity` connections (a new host when all are full). */
  place(group: string, capacity: number): HostPlace {
    const now = Date.now();
    this.hosts.sweep(now);
    const a = this.hosts.assign(group, capacity, now, "", UNBOUNDED);
    if (!("relay" in a)) throw new Error("a directory places every connection");
    const entry = this.hosts.get(a.relay) as RelayEntry;
    return { host: a.relay, group, k: entry.k, reservation: a.reservation };
  }

  /** A host's connections after a change (its reporter calls this as a relay calls its channel). */
  relayReport(_directory: string, report: RelayReport): RelayReportAnswer {
    // A host with no connection kept for a connection on its way asks again when that place lapses.
    const { leave, askAgainAt } = this.hosts.report(report, Date.now());
    return { leave, head: 0, askAgainAt };
  }

  /** Every host and its connections, for stats and the dashboard. */
  hostsNow(): { host: string; connections: number }[] {
    return this.hosts.active().map((e) => ({ host: e.name, connections: e.websockets }));
  }
}
