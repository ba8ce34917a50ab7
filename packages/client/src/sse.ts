/** A subscription's Server-Sent Events connection, and the reader of an event stream. */
import { FloodgateError, toError } from "./errors.js";
import type { ConnectionEvents } from "./transport.js";

/**
 * Opens one event stream of a subscription (`GET` with `Accept: text/event-stream`; the token in
 * `Authorization`, the resume position also in `Last-Event-ID`) and tells `on` what becomes of it.
 */
export async function connectSse(
  fetchFn: (input: string, init?: RequestInit) => Promise<Response>,
  url: string,
  token: string | undefined,
  /** `<epoch>:<seq>` (or a bare seq), as Floodgate's event ids are. */
  lastEventId: string | undefined,
  on: ConnectionEvents,
): Promise<void> {
  const abort = new AbortController();
  on.hold({ close: () => abort.abort() });
  try {
    const res = await fetchFn(url, {
      headers: {
        accept: "text/event-stream",
        ...(token ? { authorization: `Bearer ${token}` } : {}),
        ...(lastEventId !== undefined ? { "last-event-id": lastEventId } : {}),
      },
      signal: abort.signal,
    });
    if (res.status !== 200 || !res.body) throw await toError(res);
    on.live();
    let expired = false;
    await readSse(res.body, (event) => {
      if (event.event === "expired") {
        expired = true;
        on.frame(event.data); // its `seq`: where to resume
        return false;
      }
      on.frame(event.data);
    });
    if (expired) on.expired();
    else on.lost(new FloodgateError(0, "network", "event stream ended"));
  } catch (e) {
    if (!on.isClosed()) on.lost(e);
  }
}

/** One event of a server-sent event stream. */
export interface SseEvent {
  /** The event's `id:` (Floodgate sends `<epoch>:<seq>` of the message), if it has one. */
  id?: string;
  /** The event's `event:` type (`message`, `expired`, …), if it has one. */
  event?: string;
  /** The event's `data:` lines, joined with newlines. */
  data: string;
}

/**
 * Reads a server-sent event stream (`GET /v1/subscribe/{channel}` with `Accept: text/event-stream`),
 * calling `onEvent` for each event that carries data, in order, until the stream ends. It stops
 * early, cancelling the stream, when `onEvent` returns false or `signal` aborts.
 */
export async function readSse(
  body: ReadableStream<Uint8Array>,
  onEvent: (event: SseEvent) => unknown,
  signal?: AbortSignal,
): Promise<void> {
  // A streaming TextDecoder rather than `pipeThrough(new TextDecoderStream())`: DOM typings type that
  // stream's input as BufferSource, which a body's Uint8Array<ArrayBufferLike> is not, so it fails to
  // typecheck in browser projects; `decode(…, { stream: true })` accepts the chunks under DOM and Node
  // typings alike and still joins a character split across chunks.
  const reader = body.getReader();
  const stop = () => void reader.cancel().catch(() => {});
  if (signal?.aborted) return stop();
  signal?.addEventListener("abort", stop);
  try {
    const decoder = new TextDecoder();
    let buf = "";
    for (;;) {
      const { done, value } = await reader.read();
      if (done) return;
      buf = (buf + decoder.decode(value, { stream: true })).replace(/\r\n/g, "\n");
      for (let i = buf.indexOf("\n\n"); i >= 0; i = buf.indexOf("\n\n")) {
        const lines = buf.slice(0, i).split("\n");
        buf = buf.slice(i + 2);
        const field = (name: string) =>
          lines.filter((l) => l.startsWith(`${name}:`)).map((l) => l.slice(name.length + 1).replace(/^ /, ""));
        const data = field("data").join("\n");
        if (!data) continue;
        const id = field("id").at(-1);
        const type = field("event").at(-1);
        const event: SseEvent = { data };
        if (id !== undefined) event.id = id;
        if (type !== undefined) event.event = type;
        if (onEvent(event) === false) return stop();
      }
    }
  } finally {
    signal?.removeEventListener("abort", stop);
  }
}
