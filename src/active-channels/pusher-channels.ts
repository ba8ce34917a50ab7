/**
 * The occupied Pusher channels (docs/api.md, "The Pusher door": `GET /apps/{id}/channels`): each
 * `pusher:` channel's object notes here when it gains its first subscriber or loses its last (either
 * door), and a presence channel its member count, at most once a second
 * (src/channel/pusher-audience.ts). Bounded: at most {@link PUSHER_CHANNELS_KEPT} of each kind are
 * kept, public ones and private-or-presence ones apart; one more of a full kind is not listed until
 * another of its kind leaves (listings answer at most 1,000 anyway). Apart, because anyone can occupy
 * public channels (a connection subscribes to any name), but only the app's signature opens a private
 * or presence one: public channels made up by the thousand never keep the app's presence channels
 * out of `filter_by_prefix=presence-`. Each shard of a sharded channel notes a row of its own (its
 * object is a channel of its own); a listing adds them up into their channel.
 */
import { SHARD_KEY_SEPARATOR } from "../../functions/shard-key";
import { pusherName, pusherVisibility } from "../wire/pusher/names";

/** Most occupied Pusher channels listed of each kind (public; private and presence). */
export const PUSHER_CHANNELS_KEPT = 10_000;

type Kind = "public" | "private";

const kindOf = (channel: string): Kind => pusherVisibility(pusherName(channel) ?? "");

/** The rows of one kind, in SQL: private- and presence- names, or every other. */
const PRIVATE_ROWS = "(substr(channel, 1, 15) = 'pusher:private-' OR substr(channel, 1, 16) = 'pusher:presence-')";

/** A row's channel, in SQL: its key up to the shard separator (functions/shard-key.ts), if it has one. */
const CHANNEL_OF_ROW = `CASE WHEN instr(channel, '${SHARD_KEY_SEPARATOR}') > 0 THEN substr(channel, 1, instr(channel, '${SHARD_KEY_SEPARATOR}') - 1) ELSE channel END`;

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

  /**
   * Occupied channels whose name starts with `prefix` (the Floodgate name, `pusher:` included), by
   * name, at most `limit` channels. A sharded channel's shards each note a row of their own (the
   * shard's key, functions/shard-key.ts): the channel is listed once, with their members added up.
   */
  list(prefix: string, limit: number): { channel: string; users: number }[] {
    return this.sql
      .exec<{ channel: string; users: number }>(
        `SELECT name AS channel, SUM(users) AS users FROM (SELECT ${CHANNEL_OF_ROW} AS name, users FROM pusher_channels)
         WHERE substr(name, 1, ?) = ? GROUP BY name ORDER BY name LIMIT ?`,
        prefix.length,
        prefix,
        limit,
      )
      .toArray();
  }
}
