/**
 * How a channel's frames become what a host's sockets on it are sent: the protocol adapter of a lane
 * (./lane.ts). The channel sends every relay and host the same message frames (Floodgate's, built once
 * where the message is appended); a lane turns each into its protocol's text once per batch, and
 * every socket of the lane shares that text. Pusher's is the one protocol today; Floodgate's own
 * frames multiplexed on one connection would be a second adapter over the same lanes.
 *
 * Pusher: a message on `pusher:N` has the body `{"event","data"}` and becomes
 * `{"event","channel":N,"data"}` with `data` exactly as published (and a client event's `user_id` on
 * a presence channel); a summary of drops becomes the event `floodgate:summary` with the summary frame
 * as its data; the channel's Pusher frames (members, size) pass as they are; presence frames of
 * Floodgate's own protocol are not for Pusher connections.
 */
import type { LiveFrame, SideFrame } from "../wire/frame-text";
import { readEventMeta, readPusherBody } from "../wire/pusher/event-meta";
import { channelEvent } from "../wire/pusher/frames";

/** One message as its sockets are sent it: its seq, its text, and the one socket it skips. */
export interface LaneText {
  seq: number;
  text: string | null;
  exclude?: string;
}

/** One side frame as its sockets are sent it; `version`: a presence member frame's place (joiners skip older). */
export interface LaneSideText {
  text: string;
  version?: number;
}

export interface LaneProtocol {
  messages(frames: readonly LiveFrame[]): LaneText[];
  side(frames: readonly SideFrame[]): LaneSideText[];
}

/** The event name summaries of drops take on a Pusher channel (docs/api.md, "The Pusher door"). */
export const SUMMARY_EVENT = "floodgate:summary";

export class PusherLane implements LaneProtocol {
  /** The channel's Pusher name as JSON text: every event of the lane starts with it. */
  private readonly nameJson: string;

  constructor(name: string) {
    this.nameJson = JSON.stringify(name);
  }

  messages(frames: readonly LiveFrame[]): LaneText[] {
    return frames.map((f) => {
      const meta = readEventMeta(f.meta);
      const text = this.eventText(f.text, meta.user_id);
      return meta.exclude === undefined ? { seq: f.seq, text } : { seq: f.seq, text, exclude: meta.exclude };
    });
  }

  side(frames: readonly SideFrame[]): LaneSideText[] {
    const out: LaneSideText[] = [];
    for (const f of frames) {
      if (f.event === "summary") out.push({ text: channelEvent(this.nameJson, SUMMARY_EVENT, f.text) });
      else if (f.event === "pusher")
        out.push(f.version === undefined ? { text: f.text } : { text: f.text, version: f.version });
    }
    return out;
  }

  /** A message frame's Pusher event, or null when its body is not one (nothing is sent for it). */
  private eventText(frameText: string, userId: string | undefined): string | null {
    let body: unknown;
    try {
      body = (JSON.parse(frameText) as { data?: unknown }).data;
    } catch {
      return null;
    }
    const event = readPusherBody(body);
    if ("problem" in event) return null;
    return channelEvent(this.nameJson, event.event, event.data, userId);
  }
}
