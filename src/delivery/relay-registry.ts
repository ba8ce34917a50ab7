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
 * - **Active**: a relay is sent messages only once it has reported, i.e. once a subscriber's own
 *   request has reached it first (src/delivery/placement.ts). Only active relays are stored: a pending one is
 *   re-entered by its first report if the channel restarts meanwhile.
 */

export interface RelayEntry {
  name: string;
  group: string;
  k: number;
  websockets: number;
  sse: number;
  active: boolean;
  /** Reserved slots: reservation id → when it lapses (epoch ms). */
  reservations: Map<string, number>;
}

/** What a relay tells its channel (src/delivery/relay.ts). */
export interface RelayReport {
  relay: string;
  group: string;
  k: number;
  websockets: number;
  sse: number;
  /** Reservations of the subscribers that joined since the last report. */
  joined: string[];
  /** Subscribers closed for falling too far behind since the last report. */
  slowClosed: number;
}

export type Assignment = { relay: string; reservation: string } | { full: true };

/** How long a reserved slot waits for its subscriber's relay to report it. */
export const RESERVATION_TTL_MS = 30_000;

/** Where the registry keeps active relays (the channel's SQLite table). */
export interface RegistryStore {
  save(entry: RelayEntry): void;
  remove(name: string): void;
}

export class RelayRegistry {
  private readonly entries = new Map<string, RelayEntry>();

  constructor(
    private readonly store: RegistryStore,
    private readonly nameOf: (group: string, k: number) => string,
  ) {}

  /** Relays read back from storage. */
  load(rows: Iterable<Pick<RelayEntry, "name" | "group" | "k" | "websockets" | "sse">>): void {
    for (const r of rows) this.entries.set(r.name, { ...r, active: true, reservations: new Map() });
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

  /** Reserves a slot for one subscriber of `group`, or answers full past `maxSubscribers`. */
  assign(group: string, capacity: number, maxSubscribers: number, now: number): Assignment {
    const t = this.totals(now);
    if (t.websockets + t.sse + t.reserved >= maxSubscribers) return { full: true };
    const mine = [...this.entries.values()].filter((e) => e.group === group).sort((a, b) => a.k - b.k);
    let entry = mine.find((e) => e.websockets + e.sse + live(e, now) < capacity);
    if (!entry) {
      const used = new Set(mine.map((e) => e.k));
      let k = 0;
      while (used.has(k)) k++;
      entry = { name: this.nameOf(group, k), group, k, websockets: 0, sse: 0, active: false, reservations: new Map() };
      this.entries.set(entry.name, entry);
    }
    const reservation = crypto.randomUUID();
    entry.reservations.set(reservation, now + RESERVATION_TTL_MS);
    return { relay: entry.name, reservation };
  }

  /**
   * Takes a relay's counts. Answers `leave` when it is empty with no slot reserved (it is out of the
   * registry then), and `activated` when this is its first report (it is sent messages from now on).
   */
  report(r: RelayReport, now: number): { leave: boolean; activated: boolean } {
    let entry = this.entries.get(r.relay);
    if (!entry) {
      if (r.websockets + r.sse === 0) return { leave: true, activated: false };
      // Unknown (the channel restarted before its first report, or deleted its storage): known now.
      entry = { name: r.relay, group: r.group, k: r.k, websockets: 0, sse: 0, active: false, reservations: new Map() };
      this.entries.set(entry.name, entry);
    }
    entry.websockets = r.websockets;
    entry.sse = r.sse;
    for (const id of r.joined) entry.reservations.delete(id);
    if (entry.websockets + entry.sse === 0 && live(entry, now) === 0) {
      this.entries.delete(entry.name);
      if (entry.active) this.store.remove(entry.name);
      return { leave: true, activated: false };
    }
    const activated = !entry.active;
    entry.active = true;
    this.store.save(entry);
    return { leave: false, activated };
  }

  /** Forgets a relay that never reported and whose reservations all lapsed (its subscribes failed). */
  sweep(now: number): void {
    for (const e of [...this.entries.values()]) {
      if (!e.active && live(e, now) === 0) this.entries.delete(e.name);
    }
  }
}

/** Reservations not yet lapsed (lapsed ones are deleted on the way). */
function live(e: RelayEntry, now: number): number {
  for (const [id, until] of e.reservations) if (until <= now) e.reservations.delete(id);
  return e.reservations.size;
}
