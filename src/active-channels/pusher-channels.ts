/**
 * The occupied Pusher channels (docs/api.md, "The Pusher door": `GET /apps/{id}/channels`): each
 * `pusher:` channel's object notes here when it gains its first subscriber or loses its last (either
 * door), and a presence channel its member count, at most once a second
 * (src/channel/pusher-audience.ts). Bounded: at most {@link PUSHER_CHANNELS_KEPT} of each kind are
 * kept, public ones and private-or-presence ones apart; one more of a full kind is not listed until
 * another of its kind leaves (listings answer at most 1,000 anyway). Apart, because anyone can occupy
 * public channels (a connection subscribes to any name), but only the app's signature opens a private
 * or presence one: public channels made up by the thousand never keep the app's presence channels
 * out of `filter_by_prefix=presence-`.
 */
import { pusherName, pusherVisibility } from "../wire/pusher/names";

/** Most occupied Pusher channels listed of each kind (public; private and presence). */
export const PUSHER_CHANNELS_KEPT = 10_000;

type Kind = "public" | "private";

const kindOf = (channel: string): Kind => pusherVisibility(pusherName(channel) ?? "");

/** The rows of one kind, in SQL: private- and presence- names, or every other. */
const PRIVATE_ROWS = "(substr(channel, 1, 15) = 'pusher:private-' OR substr(channel, 1, 16) = 'pusher:presence-')";

export class PusherChannelList {
  /** Rows of each kind, counted once then kept up to date; null: count again. */
  private rows: Record<Kind, number> | null = null;

  constructor(private readonly sql: SqlStorage) {}

  /** `channel` now has `subscriptions` subscribers and `users` presence members. */
  note(channel: string, subscriptions: number, users: number): void {
    if (subscriptions <= 0) {
      this.sql.exec("DELETE FROM pusher_channels WHERE channel = ?", channel);
      this.rows = null;
      return;
    }
    this.rows ??= this.count();
    const kind = kindOf(channel);
    const known = this.sql.exec("SELECT 1 FROM pusher_channels WHERE channel = ?", channel).toArray().length > 0;
    if (!known && this.rows[kind] >= PUSHER_CHANNELS_KEPT) return;
    this.sql.exec(
      "INSERT INTO pusher_channels (channel, users) VALUES (?, ?) ON CONFLICT (channel) DO UPDATE SET users = excluded.users",
      channel,
      users,
    );
    if (!known) this.rows[kind]++;
  }

  private count(): Record<Kind, number> {
    const all = this.sql.exec<{ n: number }>("SELECT COUNT(*) AS n FROM pusher_channels").one().n;
    const priv = this.sql
      .exec<{ n: number }>(`SELECT COUNT(*) AS n FROM pusher_channels WHERE ${PRIVATE_ROWS}`)
      .one().n;
    return { public: all - priv, private: priv };
  }

  /** Occupied channels whose name starts with `prefix` (the Floodgate name, `pusher:` included), by name. */
  list(prefix: string, limit: number): { channel: string; users: number }[] {
    return this.sql
      .exec<{ channel: string; users: number }>(
        "SELECT channel, users FROM pusher_channels WHERE substr(channel, 1, ?) = ? ORDER BY channel LIMIT ?",
        prefix.length,
        prefix,
        limit,
      )
      .toArray();
  }
}
