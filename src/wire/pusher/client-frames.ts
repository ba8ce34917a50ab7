/**
 * What a Pusher client sends (docs/api.md, "The Pusher door"), read into one of a few shapes, or a
 * reason it cannot be: `pusher:ping`, `pusher:pong`, `pusher:subscribe`, `pusher:unsubscribe` and
 * client events (`client-*`). Pure and self-contained.
 */

import { EVENT_NAME_MAX } from "./event-meta";

export type ClientFrame =
  | { kind: "ping" }
  | { kind: "pong" }
  | { kind: "subscribe"; channel: string; auth: string | null; channelData: string | null }
  | { kind: "unsubscribe"; channel: string }
  /** `data` as text: a string as sent, anything else as its JSON. */
  | { kind: "client-event"; event: string; channel: string; data: string }
  | { kind: "bad"; message: string };

/** Reads one text frame; never throws. */
export function readClientFrame(text: string): ClientFrame {
  let frame: unknown;
  try {
    frame = JSON.parse(text);
  } catch {
    return { kind: "bad", message: "frame is not JSON" };
  }
  if (frame === null || typeof frame !== "object" || Array.isArray(frame)) {
    return { kind: "bad", message: "frame is not a JSON object" };
  }
  const f = frame as Record<string, unknown>;
  const event = f.event;
  if (typeof event !== "string") return { kind: "bad", message: 'frame has no "event" string' };
  const data = typeof f.data === "string" ? parseData(f.data) : f.data;
  switch (event) {
    case "pusher:ping":
      return { kind: "ping" };
    case "pusher:pong":
      return { kind: "pong" };
    case "pusher:subscribe":
    case "pusher:unsubscribe": {
      const d = (data ?? {}) as Record<string, unknown>;
      // No channel at all is the frame's fault: a subscription_error would name no channel a client has.
      if (typeof d !== "object" || typeof d.channel !== "string" || d.channel === "") {
        return { kind: "bad", message: `${event} needs data.channel, a non-empty string` };
      }
      if (event === "pusher:unsubscribe") return { kind: "unsubscribe", channel: d.channel };
      if (d.auth !== undefined && typeof d.auth !== "string")
        return { kind: "bad", message: "data.auth must be a string" };
      if (d.channel_data !== undefined && typeof d.channel_data !== "string") {
        return { kind: "bad", message: "data.channel_data must be a string" };
      }
      return {
        kind: "subscribe",
        channel: d.channel,
        auth: (d.auth as string | undefined) ?? null,
        channelData: (d.channel_data as string | undefined) ?? null,
      };
    }
  }
  if (event.startsWith("client-")) {
    if (event.length > EVENT_NAME_MAX) return { kind: "bad", message: `event name longer than ${EVENT_NAME_MAX}` };
    if (typeof f.channel !== "string") return { kind: "bad", message: "a client event needs a channel" };
    if (f.data === undefined) return { kind: "bad", message: "a client event needs data" };
    return {
      kind: "client-event",
      event,
      channel: f.channel,
      data: typeof f.data === "string" ? f.data : JSON.stringify(f.data),
    };
  }
  return { kind: "bad", message: `unknown event ${JSON.stringify(event.slice(0, 64))}` };
}

/** Some clients send `data` as JSON text: read it, or keep the text. */
function parseData(text: string): unknown {
  try {
    return JSON.parse(text);
  } catch {
    return text;
  }
}

/**
 * A presence subscription's `channel_data`: `{"user_id", "user_info"?}` with a user id of 1–128
 * characters (a number is taken as its text) and `user_info` at most `maxInfoBytes` as JSON.
 */
export function readChannelData(
  text: string,
  maxInfoBytes: number,
): { userId: string; userInfo: string | null } | { problem: string } {
  let v: unknown;
  try {
    v = JSON.parse(text);
  } catch {
    return { problem: "channel_data is not JSON" };
  }
  if (v === null || typeof v !== "object" || Array.isArray(v)) return { problem: "channel_data is not an object" };
  const o = v as Record<string, unknown>;
  const id = typeof o.user_id === "number" && Number.isFinite(o.user_id) ? String(o.user_id) : o.user_id;
  if (typeof id !== "string" || id.length === 0 || id.length > 128) {
    return { problem: "channel_data.user_id must be a string of 1 to 128 characters" };
  }
  const info = o.user_info === undefined ? null : JSON.stringify(o.user_info);
  if (info !== null && new TextEncoder().encode(info).byteLength > maxInfoBytes) {
    return { problem: `channel_data.user_info is larger than ${maxInfoBytes} bytes` };
  }
  return { userId: id, userInfo: info };
}
