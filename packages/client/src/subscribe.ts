/**
 * The subscribe side: one subscription over its connections (./websocket.ts or ./sse.ts, chosen by
 * ./transport.ts), reconnecting with backoff and resuming from the last seq it saw (`?after=`), so
 * `onMessage` gets every message once, in seq order; renewed at once when its token expires.
 */
import { subscribeQuery } from "../../../src/wire/subscribe-params.js";
import { type ConnectionState, connectionStates, type StateChange } from "./connection-state.js";
import { FloodgateError } from "./errors.js";
import type { ExpiredFrame, Message, PresenceFrame, SkippedSummary, Summary } from "./frames.js";
import type { Session } from "./session.js";
import { connectSse } from "./sse.js";
import { type ConnectionEvents, transportFallback } from "./transport.js";
import { connectWebSocket } from "./websocket.js";

export interface SubscribeOptions {
  /** Start after this seq, replaying retained messages above it first (0: everything retained). */
  after?: number;
  /**
   * The epoch `after` counts in: the `epoch` of the message that seq came from (docs/api.md,
   * "Numbering restarts"). If the channel's numbering restarted since, everything it kept is
   * replayed from seq 1; without it, an `after` beyond the channel's head is refused (400).
   */
  epoch?: string;
  /**
   * Default `auto`: WebSocket where the runtime has one (or `openWebSocket` is given), else SSE from
   * the start; then SSE if WebSocket opens fail 3 times in a row.
   */
  transport?: "auto" | "websocket" | "sse";
  /** Told about each disconnect and each error the subscription recovers from. */
  onError?: (error: unknown) => void;
  /**
   * Gets each summary of drops the channel sends (a channel with a `THROTTLE_SUMMARY` rule, once per
   * `SUMMARY_INTERVAL` with drops); live only, never replayed on a reconnect.
   */
  onSummary?: (summary: Summary) => void;
  /**
   * At most this many messages a second for this subscription, as a rate shorthand from `1/s` to
   * `1000/s` (`"5/s"`, `"120/m"`): its relay skips the rest for it alone (priority messages always
   * come; on a `CONFLATE_KEYS` channel the latest message per key is held for it instead), and tells
   * it what it skipped through `onSkipped`. Messages still come in seq order, with gaps.
   */
  maxRate?: string;
  /**
   * Gets each summary of what this subscription skipped — for its `maxRate`, or because its relay
   * thinned it for reading too slowly — at most once per `SUMMARY_INTERVAL`: with the messages it
   * received, they count everything the channel delivered while it was subscribed.
   */
  onSkipped?: (summary: SkippedSummary) => void;
  /**
   * Presence frames (`?presence=1`): who is here in a small channel, how many in a large one. A
   * reconnect starts again with a fresh `state` frame.
   */
  onPresence?: (p: PresenceFrame) => void;
  /** Told each change of the subscription's {@link ConnectionState}, with the transport then in use. */
  onState?: (state: ConnectionState, change: StateChange) => void;
}

export interface Subscription {
  /** The highest seq delivered to `onMessage` so far (0 before the first), in {@link epoch}'s numbering. */
  readonly lastSeq: number;
  /** The channel's epoch as last heard (undefined before the first message): store it with `lastSeq`. */
  readonly epoch: string | undefined;
  /** The transport in use now. */
  readonly transport: "websocket" | "sse";
  /** Where the subscription stands now. */
  readonly state: ConnectionState;
  /**
   * Resolves the first time the subscription is live (subscribed: the server accepted it); rejects if
   * it is closed before that. Later drops and reconnects show in `state` and `onState`.
   */
  readonly ready: Promise<void>;
  close(): void;
}

/** Subscribes; `onMessage` gets every message once, in seq order, across reconnects. */
export function subscribe(
  session: Session,
  channel: string,
  onMessage: (m: Message) => void,
  options: SubscribeOptions = {},
): Subscription {
  let lastSeq = options.after ?? 0;
  // The numbering lastSeq counts in: a message or expired frame with another one means the channel's
  // seq started again from 1 (docs/api.md, "Numbering restarts"), so every seq in it is new to us.
  let epoch = options.after !== undefined ? options.epoch : undefined;
  const numbering = (e: unknown) => {
    if (typeof e !== "string" || e === epoch) return;
    if (epoch !== undefined) {
      lastSeq = 0;
      position = null;
    }
    epoch = e;
  };
  // Where the server said this subscription stood when its token expired (the `expired` frame's
  // `seq`): on a quiet channel it was sent nothing, and resuming from there (not from the new head)
  // keeps what is published while it renews. Null until the server says.
  let position: number | null = null;
  let closed = false;
  const transport = transportFallback(options.transport, session.opts.openWebSocket);
  const states = connectionStates(() => transport.current, options.onState);
  let current: { close(): void } | null = null;
  let attempt = 0;

  const expiredAt = (m: { seq?: unknown; epoch?: unknown }) => {
    numbering(m.epoch);
    if (typeof m.seq === "number" && Number.isSafeInteger(m.seq) && m.seq >= 0)
      position = Math.max(position ?? 0, m.seq);
  };
  const deliverOne = (m: Message | Summary | SkippedSummary | PresenceFrame | ExpiredFrame) => {
    if (closed || m === null || typeof m !== "object") return;
    if (m.type === "expired") return expiredAt(m);
    // Summaries and presence frames have no seq: they neither move lastSeq nor count as messages.
    if (m.type === "summary" && "scope" in m) return void options.onSkipped?.(m);
    if (m.type === "summary") return void options.onSummary?.(m);
    if (m.type === "presence") return options.onPresence?.(m);
    if (m.type !== "message") return;
    numbering(m.epoch);
    if (!(m.seq > lastSeq)) return; // a replay overlap: already delivered
    lastSeq = m.seq;
    attempt = 0;
    onMessage(m);
  };
  // A text frame is one message, or (packed frames, `?batch=1`) an array of them in seq order,
  // handed to the application one by one.
  const deliver = (text: string) => {
    type Frame = Message | Summary | SkippedSummary | PresenceFrame;
    let parsed: Frame | Frame[];
    try {
      parsed = JSON.parse(text) as Frame | Frame[];
    } catch {
      return;
    }
    if (Array.isArray(parsed)) for (const m of parsed) deliverOne(m);
    else deliverOne(parsed);
  };

  const reconnect = (error: unknown) => {
    current = null;
    if (closed) return;
    states.set("reconnecting", error);
    options.onError?.(error);
    const wait = session.jitter(session.backoff(attempt++));
    void session.sleep(wait).then(connect);
  };

  // The server ended the subscription because `used` expired: not a failure of the connection, so
  // it resumes at once with a fresh token and the same `?after=`, and the application is not told.
  // Without a refresh token (or when the refresh fails: a revoked session) it is an ordinary
  // disconnect. An anonymous stream ended at its longest lifetime has nothing to refresh: it resumes.
  const renew = (used: string | undefined) => {
    current = null;
    if (closed) return;
    if (used === undefined) return void connect();
    const expired = new FloodgateError(401, "unauthenticated", "subscription token expired");
    if (!session.refreshToken) return reconnect(expired);
    const fresh = session.accessToken !== used ? Promise.resolve() : session.refreshOnce();
    fresh.then(connect, (e: unknown) => reconnect(e));
  };

  const connect = async () => {
    if (closed) return;
    await session.freshToken().catch(() => {});
    // Resume from the last seq (or the position the server gave, when further); with an explicit
    // `after` (even 0) the first connect replays too.
    const resume = lastSeq > 0 || options.after !== undefined || position !== null;
    const after = resume ? Math.max(lastSeq, position ?? 0) : undefined;
    const params = {
      after,
      epoch: after !== undefined ? epoch : undefined,
      presence: !!options.onPresence,
      maxRate: options.maxRate,
    };
    const query = subscribeQuery(params);
    const qs = query.toString() ? `?${query}` : "";
    // WebSockets ask for packed frames: fewer sends per message for the relay, same messages here.
    const wsQuery = subscribeQuery({ ...params, batch: true });
    // The token goes in a header or subprotocol, never the URL (URLs land in request logs). With a
    // token the subscribe is charged to its subject's budget, else to this client's IP.
    const token = session.accessToken;
    const on: ConnectionEvents = {
      isClosed: () => closed,
      hold: (connection) => {
        current = connection;
      },
      live: () => states.set("live"),
      frame: deliver,
      expired: () => renew(token),
      lost: reconnect,
    };
    if (transport.current === "websocket") {
      return connectWebSocket(
        session.opts.openWebSocket,
        `${session.baseUrl.replace(/^http/, "ws")}/v1/subscribe/${channel}?${wsQuery}`,
        token,
        {
          ...on,
          opened: () => transport.opened(),
          failed: (e) => {
            transport.failed();
            reconnect(e);
          },
        },
      );
    }
    return connectSse(
      (input, init) => session.fetchFn(input, init),
      `${session.baseUrl}/v1/subscribe/${channel}${qs}`,
      token,
      after === undefined ? undefined : epoch ? `${epoch}:${after}` : String(after),
      on,
    );
  };

  void connect();
  return {
    get lastSeq() {
      return lastSeq;
    },
    get epoch() {
      return epoch;
    },
    get transport() {
      return transport.current;
    },
    get state() {
      return states.current;
    },
    ready: states.ready,
    close: () => {
      closed = true;
      current?.close();
      states.set("closed");
    },
  };
}
