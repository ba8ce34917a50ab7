/**
 * A channel's relays and how full each is (docs/api.md, "Relays"): which relay a new subscriber goes
 * to, and the counts stats and the sampler's delivery budgets use.
 *
 * - **Assignment**: within the subscriber's placement group, the relay with the lowest k that has room
 *   (`RELAY_CAPACITY`); a new relay opens only when every relay of the group is full, so a channel
 *   with fewer subscribers than the capacity has one relay, and relays with high k drain and leave.
 * - **Reservations**: assignment reserves a slot at once, counted until the relay reports the
 *   subscriber joined (or {@link RESERVATION_TTL_MS} passes: the subscribe failed on its way), so
 *   concurrent subscribes cannot overfill a relay nor pass `MAX_SUBSCRIBERS`.
 * - **Counts**: each relay reports its WebSockets and SSE streams after every change (coalesced on
 *   the relay's side); a relay reported empty with no slot reserved leaves the registry.
 * - **Per client** (`MAX_SUBSCRIPTIONS_PER_CLIENT`): a reservation names its client (src/channel/client-cap.ts),
 *   and each report carries the relay's open subscriptions per client, so a client's total is what
 *   its real sockets hold plus its slots on the way, and follows every close the relay reports.
 * - **Anonymous** (`ANONYMOUS_SHARE`, the /48 cap): each entry keeps what its anonymous clients hold,
 *   in total and per IPv6 /48, worked out once per report, so a subscribe adds up relays, not clients.
 * - **Active**: a relay is sent messages only once it has reported, i.e. once a subscriber's own
 *   request has reached it first (src/relay/placement.ts). Only active relays are stored: a pending one is
 *   re-entered by its first report if the channel restarts meanwhile.
 * - **Connection hosts** (src/connection-host/connection-host.ts) are relays to each channel they
 *   serve, entered under their own names (`host:…`): a subscription is reserved on the host its
 *   connection is already on ({@link RelayRegistry.assignOn}), never placed by group and k like a
 *   relay's, and the same counts, caps and reports hold.
 */
import type { RelayReport } from "../relay/calls";
import { type Admission, isAnonymous, netOf } from "./client-cap";

export interface RelayEntry {
  name: string;
  group: string;
  k: number;
  websockets: number;
  sse: number;
  active: boolean;
  /** Open subscriptions per client key, as last reported (entries at most websockets + sse). */
  clients: Map<string, number>;
  /** Of {@link clients}: what anonymous clients hold, in total and per /48 (src/channel/client-cap.ts). */
  anonymous: number;
  nets: Map<string, number>;
  /** Reserved slots: reservation id → when it lapses (epoch ms) and whose it is. */
  reservations: Map<string, Reservation>;
}

export interface Reservation {
  until: number;
  client: string;
}

/**
 * A slot, or refused: `full` past `MAX_SUBSCRIBERS`, `clientFull` past the client's own cap,
 * `netFull` past its /48's, `anonymousFull` past the anonymous share.
 */
export type Assignment =
  | { relay: string; reservation: string }
  | { full: true }
  | { clientFull: true }
  | { netFull: true }
  | { anonymousFull: true };

/** No bound but the relays' own: a directory of hosts (src/host-directory/). */
export const UNBOUNDED: Admission = {
  maxSubscribers: Number.POSITIVE_INFINITY,
  maxPerClient: Number.POSITIVE_INFINITY,
  maxAnonymous: Number.POSITIVE_INFINITY,
  maxPerNet: Number.POSITIVE_INFINITY,
};

/** How long a reserved slot waits for its subscriber's relay to report it. */
export const RESERVATION_TTL_MS = 30_000;

/** Where the registry keeps active relays (the channel's SQLite table). */
export interface RegistryStore {
  save(entry: RelayEntry): void;
  remove(name: string): void;
}

export class RelayRegistry {
  private readonly entries = new Map<string, RelayEntry>();

  /**
   * @param placeable whether {@link assign} may place a subscriber on an entry: a channel's relays,
   * never its connection hosts (each is reserved on by name, {@link assignOn}); a directory of hosts
   * (src/host-directory/) places on every entry.
   */
  constructor(
    private readonly store: RegistryStore,
    private readonly nameOf: (group: string, k: number) => string,
    private readonly placeable: (name: string) => boolean = (name) => !isHostName(name),
  ) {}

  /** Relays read back from storage. */
  load(rows: Iterable<Pick<RelayEntry, "name" | "group" | "k" | "websockets" | "sse" | "clients">>): void {
    for (const r of rows)
      this.entries.set(r.name, { ...r, ...tally(r.clients), active: true, reservations: new Map() });
  }

  clear(): void {
    this.entries.clear();
  }

  /** Relays that receive messages. */
  active(): RelayEntry[] {
    return [...this.entries.values()].filter((e) => e.active);
  }

  get(name: string): RelayEntry | undefined {
    return this.entries.get(name);
  }

  get size(): number {
    return this.entries.size;
  }

  /** Subscribers of all relays, and slots reserved for subscribers on their way. */
  totals(now: number): { websockets: number; sse: number; reserved: number } {
    let websockets = 0;
    let sse = 0;
    let reserved = 0;
    for (const e of this.entries.values()) {
      websockets += e.websockets;
      sse += e.sse;
      reserved += live(e, now);
    }
    return { websockets, sse, reserved };
  }

  /** Subscriptions `client` holds on every relay together, its reserved slots included. */
  held(client: string, now: number): number {
    return this.census(client, now).client;
  }

  /**
   * What `client` holds, what its /48 holds and what anonymous clients hold, on every relay together
   * with their reserved slots; in one pass over relays and reservations, never over clients.
   */
  private census(client: string, now: number): { client: number; net: number; anonymous: number } {
    const net = netOf(client);
    const c = { client: 0, net: 0, anonymous: 0 };
    for (const e of this.entries.values()) {
      c.client += e.clients.get(client) ?? 0;
      c.anonymous += e.anonymous;
      if (net !== null) c.net += e.nets.get(net) ?? 0;
      live(e, now);
      for (const r of e.reservations.values()) {
        if (r.client === client) c.client++;
        if (!isAnonymous(r.client)) continue;
        c.anonymous++;
        if (net !== null && netOf(r.client) === net) c.net++;
      }
    }
    return c;
  }

  /** Why `client` may not have one more slot, or null when it may. */
  private refusal(client: string, now: number, limits: Admission): Exclude<Assignment, { relay: string }> | null {
    const c = this.census(client, now);
    if (c.client >= limits.maxPerClient) return { clientFull: true };
    if (isAnonymous(client) && netOf(client) !== null && c.net >= limits.maxPerNet) return { netFull: true };
    const t = this.totals(now);
    if (t.websockets + t.sse + t.reserved >= limits.maxSubscribers) return { full: true };
    if (isAnonymous(client) && c.anonymous >= limits.maxAnonymous) return { anonymousFull: true };
    return null;
  }

  /**
   * Reserves a slot for one subscriber of `group` held by `client`, or answers why not: `clientFull`,
   * `netFull`, `full` past `maxSubscribers`, `anonymousFull` (see {@link Assignment}).
   */
  assign(group: string, capacity: number, now: number, client: string, limits: Admission): Assignment {
    const refused = this.refusal(client, now, limits);
    if (refused) return refused;
    const mine = [...this.entries.values()]
      .filter((e) => e.group === group && this.placeable(e.name))
      .sort((a, b) => a.k - b.k);
    let entry = mine.find((e) => e.websockets + e.sse + live(e, now) < capacity);
    if (!entry) {
      const used = new Set(mine.map((e) => e.k));
      let k = 0;
      while (used.has(k)) k++;
      entry = { name: this.nameOf(group, k), group, k, ...empty() };
      this.entries.set(entry.name, entry);
    }
    return { relay: entry.name, reservation: this.reserve(entry, client, now) };
  }

  /**
   * Reserves a slot on the connection host `name` (placed by its own group and k), with the same
   * refusals as {@link assign}.
   */
  assignOn(name: string, group: string, k: number, now: number, client: string, limits: Admission): Assignment {
    const refused = this.refusal(client, now, limits);
    if (refused) return refused;
    let entry = this.entries.get(name);
    if (!entry) {
      entry = { name, group, k, ...empty() };
      this.entries.set(name, entry);
    }
    return { relay: name, reservation: this.reserve(entry, client, now) };
  }

  private reserve(entry: RelayEntry, client: string, now: number): string {
    const reservation = crypto.randomUUID();
    entry.reservations.set(reservation, { until: now + RESERVATION_TTL_MS, client });
    return reservation;
  }

  /**
   * Takes a relay's counts. Answers `leave` when it is empty with no slot reserved (it is out of the
   * registry then), and `activated` when this is its first report (it is sent messages from now on).
   * Empty but kept for a reserved slot: `askAgainAt`, when the last of its slots lapses (the relay's
   * answer carries it as is, src/relay/calls.ts).
   */
  report(r: RelayReport, now: number): { leave: boolean; activated: boolean; askAgainAt?: number } {
    let entry = this.entries.get(r.relay);
    if (!entry) {
      if (r.websockets + r.sse === 0) return { leave: true, activated: false };
      // Unknown (the channel restarted before its first report, or deleted its storage): known now.
      entry = { name: r.relay, group: r.group, k: r.k, ...empty() };
      this.entries.set(entry.name, entry);
    }
    entry.websockets = r.websockets;
    entry.sse = r.sse;
    entry.clients = clientCounts(r.clients, r.websockets + r.sse);
    Object.assign(entry, tally(entry.clients));
    for (const id of r.joined) entry.reservations.delete(id);
    if (entry.websockets + entry.sse === 0 && live(entry, now) === 0) {
      this.entries.delete(entry.name);
      if (entry.active) this.store.remove(entry.name);
      return { leave: true, activated: false };
    }
    const activated = !entry.active;
    entry.active = true;
    this.store.save(entry);
    if (entry.websockets + entry.sse > 0) return { leave: false, activated };
    let askAgainAt = now;
    for (const slot of entry.reservations.values()) askAgainAt = Math.max(askAgainAt, slot.until);
    return { leave: false, activated, askAgainAt };
  }

  /** Forgets a relay that never reported and whose reservations all lapsed (its subscribes failed). */
  sweep(now: number): void {
    for (const e of [...this.entries.values()]) {
      if (!e.active && live(e, now) === 0) this.entries.delete(e.name);
    }
  }
}

/** A connection host's entry (src/connection-host/naming.ts names them `host:…`), not a relay's. */
export function isHostName(name: string): boolean {
  return name.startsWith("host:");
}

/** Reservations not yet lapsed (lapsed ones are deleted on the way). */
function live(e: RelayEntry, now: number): number {
  for (const [id, r] of e.reservations) if (r.until <= now) e.reservations.delete(id);
  return e.reservations.size;
}

function empty(): Omit<RelayEntry, "name" | "group" | "k"> {
  return {
    websockets: 0,
    sse: 0,
    active: false,
    clients: new Map(),
    anonymous: 0,
    nets: new Map(),
    reservations: new Map(),
  };
}

/** What a relay's anonymous clients hold, in total and per /48 (no more entries than its clients). */
function tally(clients: Map<string, number>): Pick<RelayEntry, "anonymous" | "nets"> {
  let anonymous = 0;
  const nets = new Map<string, number>();
  for (const [key, n] of clients) {
    if (!isAnonymous(key)) continue;
    anonymous += n;
    const net = netOf(key);
    if (net !== null) nets.set(net, (nets.get(net) ?? 0) + n);
  }
  return { anonymous, nets };
}

/**
 * A relay's per-client counts, bounded by its subscribers: no more entries, and no more in total,
 * than the `subscribers` it reports (a relay holds at most RELAY_CAPACITY), so the map a channel keeps
 * per relay never outgrows the relay's sockets whatever a report says. Malformed pairs are skipped.
 */
export function clientCounts(pairs: unknown, subscribers: number): Map<string, number> {
  const counts = new Map<string, number>();
  if (!Array.isArray(pairs)) return counts;
  let left = subscribers;
  for (const p of pairs) {
    if (left <= 0) break;
    if (!Array.isArray(p) || typeof p[0] !== "string" || !Number.isInteger(p[1]) || p[1] <= 0) continue;
    const n = Math.min(p[1] as number, left);
    counts.set(p[0], (counts.get(p[0]) ?? 0) + n);
    left -= n;
  }
  return counts;
}
