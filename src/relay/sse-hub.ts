/**
 * A relay's Server-Sent Events subscribers (docs/api.md, "Subscribing"; "Slow subscribers"): each
 * reader is a stream whose backlog is counted in bytes on its writable side, so a reader that falls
 * behind is thinned and, still over {@link SUBSCRIBER_MAX_BEHIND_BYTES} at 1 message a second, cut off
 * (its backlog discarded, its last summary still its last event; a clean end: the client reconnects
 * with `Last-Event-ID`) instead of being buffered for without
 * bound, and never slows the others (writes do not wait). Every stream also gets a comment line per relay heartbeat ({@link SseHub.heartbeat}), and
 * ends with `event: expired`: one opened with a token when the token does ({@link SseHub.expire}) or
 * its session is revoked ({@link SseHub.revoke}), an anonymous one after {@link SSE_ANONYMOUS_MAX_MS}.
 */

import { STREAM_LIFETIME_REASON, TOKEN_EXPIRED_REASON } from "../wire/close-codes";
import { expiredFrame, sseId } from "../wire/frame-text";
import { SSE_ANONYMOUS_MAX_MS, SUBSCRIBER_MAX_BEHIND_BYTES } from "./bounds";

export interface SseClient {
  writer: WritableStreamDefaultWriter<Uint8Array>;
  /**
   * Ends the reader's stream cleanly and discards what is still queued for it; `last`, when given,
   * is still its last chunk.
   */
  terminate: (last?: Uint8Array) => void;
  closed: boolean;
  /** Messages up to this seq were replayed (or predate the subscription): never sent live. */
  floor: number;
  /**
   * When the stream ends (epoch ms): its token's expiry, or for an anonymous one its longest lifetime
   * ({@link SSE_ANONYMOUS_MAX_MS} after it opened); `endReason` is what its `expired` event says.
   */
  expiresAt: number;
  endReason: string;
  /** The session of its token (`sid`), for revocation; absent when anonymous or minted without one. */
  sid?: string;
  /** Whose subscription this is (src/channel/client-cap.ts), for the relay's per-client counts. */
  client: string;
  /** It asked for presence frames (`?presence=1`, docs/api.md, "Presence"). */
  presence?: boolean;
}

/**
 * One chunk carries every frame of a flush (the runtime moves a stream chunk by chunk, so a frame
 * per chunk could not keep up with a busy channel), and the bound counts the chunk's bytes: a reader
 * of small frames and one of large frames are held to the same memory.
 */
const SSE_QUEUE: QueuingStrategy<Uint8Array> = {
  highWaterMark: SUBSCRIBER_MAX_BEHIND_BYTES,
  size: (chunk) => chunk.byteLength,
};

const encoder = new TextEncoder();
const SSE_HELLO = encoder.encode(": subscribed\nretry: 1000\n\n");
/** A comment line: ignored by every reader, and a write that finds a reader gone. */
const SSE_KEEPALIVE = encoder.encode(": keepalive\n\n");

export class SseHub {
  /** Live readers (a reader still being replayed to is not here yet). */
  readonly live = new Set<SseClient>();
  /** Readers connected and not yet gone: live ones and those being replayed to. */
  readonly all = new Set<SseClient>();

  /** @param onLeave called once when a reader goes (cut off, ended, or disconnected). */
  constructor(private readonly onLeave: () => void) {}

  /** Readers connected now, live or being replayed to. */
  get size(): number {
    return this.all.size;
  }

  /**
   * A new reader with the stream's greeting queued; not live until {@link goLive}. `expiresAt` is its
   * token's expiry, or null when anonymous: it then ends {@link SSE_ANONYMOUS_MAX_MS} after `now`.
   */
  connect(
    floor: number,
    expiresAt: number | null,
    key: string,
    now: number,
    sid?: string,
  ): { client: SseClient; response: Response } {
    let terminate = (_last?: Uint8Array) => {};
    const stream = new TransformStream<Uint8Array, Uint8Array>(
      {
        start(controller) {
          terminate = (last) => {
            // Straight onto the readable side, past the queue that terminating discards: the reader
            // takes it after the chunk it may hold already, then the end.
            try {
              if (last) controller.enqueue(last);
            } catch {
              // the reader is gone
            }
            controller.terminate();
          };
        },
      },
      SSE_QUEUE,
    );
    const client: SseClient = {
      writer: stream.writable.getWriter(),
      terminate,
      closed: false,
      floor,
      expiresAt: expiresAt ?? now + SSE_ANONYMOUS_MAX_MS,
      endReason: expiresAt === null ? STREAM_LIFETIME_REASON : TOKEN_EXPIRED_REASON,
      client: key,
    };
    if (sid !== undefined) client.sid = sid;
    this.all.add(client);
    client.writer.closed.then(
      () => this.drop(client),
      () => this.drop(client),
    );
    this.write(client, SSE_HELLO);
    return { client, response: sseResponse(stream.readable) };
  }

  goLive(client: SseClient): void {
    if (!client.closed) this.live.add(client);
  }

  /**
   * Writes one chunk of events, whatever waits already: a reader past half the bound is thinned by the
   * relay after the pass, and cut off ({@link cut}) only if it still overflows at 1 message a second.
   */
  write(client: SseClient, chunk: Uint8Array): void {
    if (client.closed) return;
    client.writer.write(chunk).catch(() => this.drop(client));
  }

  /** Bytes queued for a reader and not yet taken by its connection. */
  backlog(client: SseClient): number {
    const desired = client.writer.desiredSize;
    return desired === null ? 0 : SUBSCRIBER_MAX_BEHIND_BYTES - desired;
  }

  /** A comment line to every reader: it keeps proxies from closing an idle stream and finds readers gone. */
  heartbeat(): void {
    for (const client of [...this.all]) this.write(client, SSE_KEEPALIVE);
  }

  /**
   * Ends, with `event: expired` (after what `last` writes), every stream due by `now` (its token
   * expired, or an anonymous one's lifetime is up); answers how many. The event carries the reader's
   * position (`position`: the last seq it was sent or is past) as its `seq` and `id`, so the client
   * resumes with `?after=` (an EventSource with `Last-Event-ID`) from there even when it was sent nothing.
   */
  expire(
    now: number,
    position: (client: SseClient) => number,
    last?: (client: SseClient) => void,
    epoch?: string,
  ): number {
    return this.endWhere((c) => c.expiresAt <= now, null, position, last, epoch);
  }

  /** Ends, with `event: expired` and `reason`, every stream of a session in `sids`; answers how many. */
  revoke(
    sids: ReadonlySet<string>,
    reason: string,
    position: (client: SseClient) => number,
    last?: (client: SseClient) => void,
    epoch?: string,
  ): number {
    return this.endWhere((c) => c.sid !== undefined && sids.has(c.sid), reason, position, last, epoch);
  }

  private endWhere(
    due: (client: SseClient) => boolean,
    reason: string | null,
    position: (client: SseClient) => number,
    last?: (client: SseClient) => void,
    epoch?: string,
  ): number {
    let n = 0;
    for (const client of [...this.all]) {
      if (!due(client)) continue;
      n++;
      // What it is told before it ends (a thinned reader's last summary).
      last?.(client);
      const seq = position(client);
      const frame = expiredFrame(seq, epoch, reason ?? client.endReason);
      // Written whatever the backlog: it is the reader's last event, and the stream ends after it.
      client.writer
        .write(encoder.encode(`id: ${sseId(seq, epoch)}\nevent: expired\ndata: ${frame}\n\n`))
        .catch(() => {});
      this.end(client);
    }
    return n;
  }

  /** The earliest end among the readers (epoch ms), or null when there are none. */
  earliestExpiry(): number | null {
    let earliest: number | null = null;
    for (const c of this.all) if (earliest === null || c.expiresAt < earliest) earliest = c.expiresAt;
    return earliest;
  }

  /** The sessions the readers hold. */
  sessions(into: Set<string>): void {
    for (const c of this.all) if (c.sid !== undefined) into.add(c.sid);
  }

  /** Ends a reader's stream after what was written (a replay past the bound, a gap in history). */
  end(client: SseClient): void {
    if (client.closed) return;
    client.writer.close().catch(() => {});
    this.drop(client);
  }

  /**
   * Cuts a reader off at once, discarding its backlog (a slow reader; the relay's memory bound):
   * `last`, when given (a thinned reader's last summary), is written after the discard, so it still
   * reaches the reader, as the stream's last event.
   */
  cut(client: SseClient, last?: Uint8Array): void {
    this.drop(client, true, last);
  }

  private drop(client: SseClient, abort = false, last?: Uint8Array): void {
    if (client.closed) return;
    client.closed = true;
    this.live.delete(client);
    this.all.delete(client);
    // A clean end (the client reconnects with Last-Event-ID), not an error: aborting the stream made
    // workerd log an uncaught exception for every reader cut off. The queued backlog is discarded.
    if (abort) client.terminate(last);
    this.onLeave();
  }
}

export function sseResponse(body: ReadableStream<Uint8Array>): Response {
  return new Response(body, {
    headers: {
      "content-type": "text/event-stream; charset=utf-8",
      "cache-control": "no-cache, no-transform",
      "x-accel-buffering": "no",
    },
  });
}
