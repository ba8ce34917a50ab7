/**
 * A connection host's storage (./schema.ts): every read and write of its tables, which exist from its
 * first connection until it is left with none (then `deleteAll` takes them, and {@link HostStore.forget}).
 */
import type { LaneSub } from "./lane";
import {
  createHostTables,
  type HostRow,
  hostTablesExist,
  type LaneRow,
  type SubscriptionRow,
  upgradeHostTables,
} from "./schema";

export class HostStore {
  private ready = false;

  constructor(private readonly sql: SqlStorage) {}

  /** What a restart finds: who the host is, its lanes and every socket's subscriptions; null: none. */
  restored(): { host: HostRow; lanes: LaneRow[]; subscriptions: SubscriptionRow[] } | null {
    if (!hostTablesExist(this.sql)) return null;
    upgradeHostTables(this.sql);
    this.ready = true;
    const host = this.sql.exec<HostRow>("SELECT name, grp, k FROM host").toArray()[0];
    if (!host) return null;
    return {
      host,
      lanes: this.sql.exec<LaneRow>("SELECT channel, last_seq, reported, generation FROM lanes").toArray(),
      subscriptions: this.sql.exec<SubscriptionRow>("SELECT * FROM subscriptions").toArray(),
    };
  }

  storeHost(id: { name: string; group: string; k: number }): void {
    this.ensure();
    this.sql.exec("INSERT OR REPLACE INTO host (id, name, grp, k) VALUES (1, ?, ?, ?)", id.name, id.group, id.k);
  }

  storeSubscription(socketId: string, key: string, sub: LaneSub): void {
    this.ensure();
    this.sql.exec(
      "INSERT OR REPLACE INTO subscriptions (socket, channel, floor, user_id, user_info) VALUES (?, ?, ?, ?, ?)",
      socketId,
      key,
      sub.floor,
      sub.userId,
      sub.userInfo,
    );
  }

  deleteSubscription(socketId: string, key: string): void {
    if (this.ready) this.sql.exec("DELETE FROM subscriptions WHERE socket = ? AND channel = ?", socketId, key);
  }

  storeLane(key: string, lastSeq: number, reported: number, generation: number): void {
    this.ensure();
    this.sql.exec(
      "INSERT OR REPLACE INTO lanes (channel, last_seq, reported, generation) VALUES (?, ?, ?, ?)",
      key,
      lastSeq,
      reported,
      generation,
    );
  }

  deleteLane(key: string): void {
    if (this.ready) this.sql.exec("DELETE FROM lanes WHERE channel = ?", key);
  }

  /** Its storage is being deleted: the next write creates the tables again. */
  forget(): void {
    this.ready = false;
  }

  private ensure(): void {
    if (this.ready) return;
    createHostTables(this.sql);
    this.ready = true;
  }
}
