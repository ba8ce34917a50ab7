/**
 * The occupied Pusher channels (docs/api.md, "The Pusher door": `GET /apps/{id}/channels`): each
 * `pusher:` channel's object notes here when it gains its first subscriber or loses its last (either
 * door), and a presence channel its member count, at most once a second
 * (src/channel/pusher-audience.ts). Bounded: at most {@link PUSHER_CHANNELS_KEPT} are kept; one more
 * is not listed until another leaves (listings answer at most 1,000 anyway).
 */

/** Most occupied Pusher channels listed. */
export const PUSHER_CHANNELS_KEPT = 10_000;

export class PusherChannelList {
  private rows: number | null = null;

  constructor(private readonly sql: SqlStorage) {}

  /** `channel` now has `subscriptions` subscribers and `users` presence members. */
  note(channel: string, subscriptions: number, users: number): void {
    if (subscriptions <= 0) {
      this.sql.exec("DELETE FROM pusher_channels WHERE channel = ?", channel);
      this.rows = null;
      return;
    }
    this.rows ??= this.sql.exec<{ n: number }>("SELECT COUNT(*) AS n FROM pusher_channels").one().n;
    const known = this.sql.exec("SELECT 1 FROM pusher_channels WHERE channel = ?", channel).toArray().length > 0;
    if (!known && this.rows >= PUSHER_CHANNELS_KEPT) return;
    this.sql.exec(
      "INSERT INTO pusher_channels (channel, users) VALUES (?, ?) ON CONFLICT (channel) DO UPDATE SET users = excluded.users",
      channel,
      users,
    );
    if (!known) this.rows++;
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
