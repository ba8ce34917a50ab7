/**
 * The Pusher protocol's server frames as text (docs/api.md, "The Pusher door"). Channel events and
 * `pusher_internal:*` frames carry `data` as a JSON string; `pusher:error` and
 * `pusher:subscription_error` carry it as an object, as Pusher's own servers do. Pure and
 * self-contained.
 */

const q = JSON.stringify;

/** The first frame of a connection: its socket id and how long it may stay silent. */
export function connectionEstablished(socketId: string, activityTimeoutS: number): string {
  return `{"event":"pusher:connection_established","data":${q(q({ socket_id: socketId, activity_timeout: activityTimeoutS }))}}`;
}

/**
 * The server's ping, and exactly the text pusher-js sends as its own: that one is answered with
 * {@link PONG} by the runtime without waking the connection's host.
 */
export const PING = '{"event":"pusher:ping","data":{}}';
export const PONG = '{"event":"pusher:pong","data":{}}';

/** A `pusher:error`; the connection stays unless a close with the same code follows. */
export function pusherError(code: number, message: string): string {
  return `{"event":"pusher:error","data":{"code":${code},"message":${q(message)}}}`;
}

/** A subscription that failed; nothing else changed. `status` is the HTTP status it stands for. */
export function subscriptionError(channel: string, status: number, type: string, error: string): string {
  return `{"event":"pusher:subscription_error","channel":${q(channel)},"data":{"type":${q(type)},"error":${q(error)},"status":${status}}}`;
}

/** A subscription that succeeded: `data` is `{}`, or the presence set (already JSON text). */
export function subscriptionSucceeded(channel: string, dataJson = "{}"): string {
  return `{"event":"pusher_internal:subscription_succeeded","channel":${q(channel)},"data":${q(dataJson)}}`;
}

/**
 * One event: `channelJson` is the channel's name as JSON text (a channel's frames share it), `data`
 * the event's data exactly as published; `userId` on a client event of a presence channel.
 */
export function channelEvent(channelJson: string, event: string, data: string, userId?: string): string {
  const user = userId === undefined ? "" : `,"user_id":${q(userId)}`;
  return `{"event":${q(event)},"channel":${channelJson},"data":${q(data)}${user}}`;
}

/** A presence member arrived (its user's first connection). */
export function memberAdded(channel: string, userId: string, userInfoJson: string | null): string {
  const info = userInfoJson === null ? "" : `,"user_info":${userInfoJson}`;
  return `{"event":"pusher_internal:member_added","channel":${q(channel)},"data":${q(`{"user_id":${q(userId)}${info}}`)}}`;
}

/** A presence member left (its user's last connection). */
export function memberRemoved(channel: string, userId: string): string {
  return `{"event":"pusher_internal:member_removed","channel":${q(channel)},"data":${q(`{"user_id":${q(userId)}}`)}}`;
}

/** How many subscribe to a channel, through either door. */
export function subscriptionCount(channel: string, count: number): string {
  return `{"event":"pusher_internal:subscription_count","channel":${q(channel)},"data":${q(`{"subscription_count":${count}}`)}}`;
}

/**
 * The presence set of `subscription_succeeded`: `{"presence":{"ids","hash","count"}}` (ids and hash
 * empty above `PRESENCE_ANNOUNCE_MAX` members). `members` maps a user id to its `user_info` JSON
 * text (null: none given).
 */
export function presenceSet(members: Iterable<[string, string | null]>, count: number): string {
  const ids: string[] = [];
  const hash: string[] = [];
  for (const [id, info] of members) {
    ids.push(q(id));
    hash.push(`${q(id)}:${info ?? "null"}`);
  }
  return `{"presence":{"ids":[${ids.join(",")}],"hash":{${hash.join(",")}},"count":${count}}}`;
}
