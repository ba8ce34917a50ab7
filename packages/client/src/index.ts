/**
 * Floodgate's TypeScript client: dependency-free, for browsers, Node 20+ and Workers.
 *
 * ```ts
 * import { FloodgateClient } from "@floodgate/client";
 * const fg = new FloodgateClient({ baseUrl: "https://floodgate.example.com", accessToken, refreshToken });
 * const r = await fg.publish("public:live.reactions", { emoji: "🔥" }); // {status:"delivered",seq,…} | {status:"dropped"}
 * const sub = fg.subscribe("public:live.reactions", (m) => console.log(m.seq, m.data));
 * sub.close();
 * ```
 *
 * - `publish` sends an `Idempotency-Key` (one per call, reused by its retries, so a retry never
 *   duplicates), retries 429 after `Retry-After` and 5xx/network errors with capped, jittered
 *   backoff, and never retries a 202: a dropped message is an answer, not a failure.
 * - `subscribe` uses a WebSocket, reconnects with backoff and resumes from the last seq it saw
 *   (`?after=`), dropping anything at or below it, so there are no gaps and no repeats; it starts on
 *   Server-Sent Events where the runtime has no WebSocket, and falls back to them when WebSockets keep
 *   failing. `sub.ready` resolves once it is live; `onState` tells connecting → live → reconnecting
 *   → live … → closed.
 * - `mintTokens(admin, request)` mints a pair from a server holding `ADMIN_TOKEN`; `refreshTokens`
 *   exchanges a refresh token without a client. Its WebSocket asks for
 *   packed frames (`?batch=1`, many messages per frame); messages still reach `onMessage` one by one.
 *   With `onPresence` it asks for presence frames too (`?presence=1`); `presence()` asks who is here.
 * - Tokens are refreshed shortly before the access token expires (and once after a 401). A
 *   subscription the server ends because its token expired (WebSocket close 4001, SSE
 *   `event: expired`) is refreshed and resumed at once, without telling `onError`, from the
 *   position that last frame gives (so a quiet subscription misses nothing published meanwhile).
 * - Errors are typed after the API's error codes (docs/api.md): {@link FloodgateError} with `code`, `metaCode`,
 *   `status`; {@link RateLimitedError} carries `retryAfterMs`.
 */

/** The error codes of the API (docs/api.md). */
export type ErrorCode =
  | "invalid_argument"
  | "unauthenticated"
  | "permission_denied"
  | "bad_route"
  | "resource_exhausted"
  | "internal"
  | "unavailable"
  | "network";

export class FloodgateError extends Error {
  readonly status: number;
  readonly code: ErrorCode;
  /** `meta.code`: e.g. `PAYLOAD_TOO_LARGE`, `RATE_LIMITED`. */
  readonly metaCode: string;
  readonly meta: Record<string, string>;

  constructor(status: number, code: ErrorCode, message: string, meta: Record<string, string> = {}) {
    super(message);
    this.name = "FloodgateError";
    this.status = status;
    this.code = code;
    this.metaCode = meta.code ?? code.toUpperCase();
    this.meta = meta;
  }
}

export class RateLimitedError extends FloodgateError {
  /** How long the server asked to wait. */
  readonly retryAfterMs: number;
  constructor(message: string, meta: Record<string, string>, retryAfterMs: number) {
    super(429, "resource_exhausted", message, meta);
    this.name = "RateLimitedError";
    this.retryAfterMs = retryAfterMs;
  }
}

export interface TokenPair {
  access_token: string;
  refresh_token: string;
  expires_at: number;
  refresh_expires_at: number;
}

/** A publish's answer (docs/api.md): delivered with its seq, or dropped by the throttle. */
export type PublishResult =
  /** `shard`: on a sharded channel, the shard the message went into (docs/api.md, "Shards"). */
  | { status: "delivered"; channel: string; shard?: string; seq: number; id: string; published_at: number }
  | { status: "dropped" };

/** A broadcast's answer (`shard: "*"`): the shards it was delivered into, each with its own seq. */
export interface BroadcastResult {
  status: "delivered";
  channel: string;
  shards: string[];
  published_at: number;
}

export interface Message {
  type: "message";
  channel: string;
  /** On a sharded channel only: the subscriber's shard (docs/api.md, "Shards"). */
  shard?: string;
  seq: number;
  id: string;
  data: unknown;
  published_at: number;
}

/**
 * A summary of what the throttle dropped on a channel in [`from`, `to`) (epoch ms), grouped by the
 * value its `THROTTLE_SUMMARY` rule points to: the 20 largest keys and `"(other)"`, adding up to
 * `dropped`. It carries no seq: it is never in history and never replayed (docs/api.md, "Summaries
 * of drops").
 */
export interface Summary {
  type: "summary";
  channel: string;
  from: number;
  to: number;
  dropped: number;
  by_key: Record<string, number>;
}

/**
 * A presence frame (docs/api.md, "Presence"): `state` first (counting this subscriber), then `join`
 * and `leave` in a small channel, or at most one `interval` per `PRESENCE_INTERVAL` in a large one.
 */
export type PresenceFrame =
  | { type: "presence"; channel: string; action: "state"; occupancy: number; subjects?: string[] }
  | { type: "presence"; channel: string; action: "join" | "leave"; subject: string | null; occupancy: number }
  | { type: "presence"; channel: string; action: "interval"; occupancy: number; joined: number; left: number };

/** `GET /v1/presence/{channel}`: `subjects` only in `announce` mode. */
export interface PresenceAnswer {
  channel: string;
  occupancy: number;
  mode: "announce" | "interval";
  subjects?: string[];
}

/** The part of a WebSocket the client uses (browser, Node 22 and workerd sockets all have it). */
export interface SocketLike {
  addEventListener(type: "message", fn: (ev: { data: unknown }) => void): void;
  addEventListener(type: "close" | "error", fn: (ev: { code?: number }) => void): void;
  close(code?: number, reason?: string): void;
}

export interface ClientOptions {
  /** e.g. `https://floodgate.example.com` (no trailing slash needed). */
  baseUrl: string;
  accessToken?: string;
  refreshToken?: string;
  /** Called with every new pair after a refresh, so the caller can store it. */
  onTokens?: (pair: TokenPair) => void;
  /** Default: the global `fetch`. */
  fetch?: (input: string, init?: RequestInit) => Promise<Response>;
  /**
   * Opens a WebSocket with these subprotocols and resolves once it is open. Default: the global
   * `WebSocket`. The access token travels as the subprotocol `bearer.<token>` next to `floodgate`,
   * never in the URL. Return a rejected promise to make `subscribe` use SSE.
   */
  openWebSocket?: (url: string, protocols: string[]) => Promise<SocketLike>;
  /** Retries per publish after the first attempt. Default 5. */
  maxRetries?: number;
  /** Cap on any single wait between attempts, in ms. Default 10,000. */
  maxBackoffMs?: number;
  /** Refresh the access token this long before it expires, in ms. Default 30,000. */
  refreshMarginMs?: number;
  /** For tests: the wait between attempts and the random source for jitter. */
  sleep?: (ms: number) => Promise<void>;
  random?: () => number;
  now?: () => number;
}

export interface PublishOptions {
  /** Default: a fresh random key per call, reused by that call's retries. */
  idempotencyKey?: string;
  /** Overrides the client's `maxRetries` for this call. */
  retries?: number;
  /**
   * `high` (a token with the `priority` scope): never dropped by the throttle, sent as
   * `Floodgate-Priority: high`. Default: an ordinary publish.
   */
  priority?: "high" | "normal";
  /**
   * `Floodgate-Shard` (a token with the `broadcast` scope, on a sharded channel): `"*"` delivers into
   * every shard with subscribers or history, a shard's name into that shard.
   */
  shard?: string;
}

export interface SubscribeOptions {
  /** Start after this seq, replaying retained messages above it first (0: everything retained). */
  after?: number;
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
   * Presence frames (`?presence=1`): who is here in a small channel, how many in a large one. A
   * reconnect starts again with a fresh `state` frame.
   */
  onPresence?: (p: PresenceFrame) => void;
  /** Told each change of the subscription's {@link ConnectionState}, with the transport then in use. */
  onState?: (state: ConnectionState, change: StateChange) => void;
}

/**
 * Where a subscription stands (as Ably's and PubNub's SDKs report it): `connecting` to its first
 * connection, `live` (subscribed: the server accepted it and messages flow), `reconnecting` after a
 * drop until it is live again, `closed` once `close()` was called.
 */
export type ConnectionState = "connecting" | "live" | "reconnecting" | "closed";

export interface StateChange {
  previous: ConnectionState;
  transport: "websocket" | "sse";
  /** What ended the previous connection, for `reconnecting`. */
  reason?: unknown;
}

export interface Subscription {
  /** The highest seq delivered to `onMessage` so far (0 before the first). */
  readonly lastSeq: number;
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

const BASE_BACKOFF_MS = 250;
/** The close code of a WebSocket subscription whose token expired (docs/api.md). */
const TOKEN_EXPIRED_CLOSE = 4001;

export class FloodgateClient {
  private readonly baseUrl: string;
  private accessToken: string | undefined;
  private refreshToken: string | undefined;
  private refreshing: Promise<void> | null = null;
  private readonly opts: ClientOptions;
  private readonly fetchFn: (input: string, init?: RequestInit) => Promise<Response>;
  private readonly sleep: (ms: number) => Promise<void>;
  private readonly random: () => number;
  private readonly now: () => number;

  constructor(opts: ClientOptions) {
    this.opts = opts;
    this.baseUrl = opts.baseUrl.replace(/\/+$/, "");
    this.accessToken = opts.accessToken;
    this.refreshToken = opts.refreshToken;
    this.fetchFn = opts.fetch ?? ((input, init) => fetch(input, init));
    this.sleep = opts.sleep ?? ((ms) => new Promise((r) => setTimeout(r, ms)));
    this.random = opts.random ?? Math.random;
    this.now = opts.now ?? Date.now;
  }

  /** Publishes one JSON value. Resolves with the delivery or the drop; rejects with a FloodgateError. */
  /** A broadcast into every shard (`Floodgate-Shard: *`, a token with the `broadcast` scope). */
  publish(channel: string, data: unknown, options: PublishOptions & { shard: "*" }): Promise<BroadcastResult>;
  publish(channel: string, data: unknown, options?: PublishOptions): Promise<PublishResult>;
  async publish(
    channel: string,
    data: unknown,
    options: PublishOptions = {},
  ): Promise<PublishResult | BroadcastResult> {
    const key = options.idempotencyKey ?? randomKey();
    const retries = options.retries ?? this.opts.maxRetries ?? 5;
    const body = JSON.stringify(data);
    let refreshedAfter401 = false;
    for (let attempt = 0; ; attempt++) {
      await this.freshToken();
      let res: Response;
      try {
        res = await this.fetchFn(`${this.baseUrl}/v1/publish/${channel}`, {
          method: "POST",
          headers: {
            "content-type": "application/json",
            "idempotency-key": key,
            ...(options.priority ? { "floodgate-priority": options.priority } : {}),
            ...(options.shard !== undefined ? { "floodgate-shard": options.shard } : {}),
            ...(this.accessToken ? { authorization: `Bearer ${this.accessToken}` } : {}),
          },
          body,
        });
      } catch (e) {
        if (attempt >= retries) throw new FloodgateError(0, "network", `publish failed: ${String(e)}`);
        await this.sleep(this.backoff(attempt));
        continue;
      }
      if (res.status === 200 || res.status === 202) return (await res.json()) as PublishResult | BroadcastResult;
      const error = await toError(res);
      if (error.status === 401 && this.refreshToken && !refreshedAfter401) {
        refreshedAfter401 = true;
        await this.refresh();
        attempt--; // a refresh is not a retry
        continue;
      }
      const retryable = error instanceof RateLimitedError || error.status >= 500;
      if (!retryable || attempt >= retries) throw error;
      const wait = error instanceof RateLimitedError ? error.retryAfterMs : this.backoff(attempt);
      await this.sleep(this.jitter(Math.min(wait, this.maxBackoff())));
    }
  }

  /** Exchanges the refresh token for a new pair (a refresh token works once). */
  async refresh(): Promise<TokenPair> {
    if (!this.refreshToken) throw new FloodgateError(401, "unauthenticated", "no refresh token");
    const res = await this.fetchFn(`${this.baseUrl}/v1/tokens/refresh`, {
      method: "POST",
      headers: { "content-type": "application/json" },
      body: JSON.stringify({ refresh_token: this.refreshToken }),
    });
    if (res.status !== 200) throw await toError(res);
    const pair = (await res.json()) as TokenPair;
    this.accessToken = pair.access_token;
    this.refreshToken = pair.refresh_token;
    this.opts.onTokens?.(pair);
    return pair;
  }

  /** How many are subscribed to `channel` now, and in a small channel who (`GET /v1/presence`). */
  async presence(channel: string): Promise<PresenceAnswer> {
    await this.freshToken().catch(() => {});
    const token = this.accessToken;
    const res = await this.fetchFn(`${this.baseUrl}/v1/presence/${channel}`, {
      headers: token ? { authorization: `Bearer ${token}` } : {},
    });
    if (res.status !== 200) throw await toError(res);
    return (await res.json()) as PresenceAnswer;
  }

  /** Subscribes; `onMessage` gets every message once, in seq order, across reconnects. */
  subscribe(channel: string, onMessage: (m: Message) => void, options: SubscribeOptions = {}): Subscription {
    let lastSeq = options.after ?? 0;
    // Where the server said this subscription stood when its token expired (the `expired` frame's
    // `seq`): on a quiet channel it was sent nothing, and resuming from there (not from the new head)
    // keeps what is published while it renews. Null until the server says.
    let position: number | null = null;
    let closed = false;
    let transport: "websocket" | "sse" = initialTransport(options.transport, this.opts.openWebSocket);
    let wsFailures = 0;
    const states = connectionStates(() => transport, options.onState);
    let current: { close(): void } | null = null;
    let attempt = 0;

    const expiredAt = (m: { seq?: unknown }) => {
      if (typeof m.seq === "number" && Number.isSafeInteger(m.seq) && m.seq >= 0)
        position = Math.max(position ?? 0, m.seq);
    };
    const deliverOne = (m: Message | Summary | PresenceFrame | { type: "expired"; seq?: unknown }) => {
      if (closed || m === null || typeof m !== "object") return;
      if (m.type === "expired") return expiredAt(m);
      // Summaries and presence frames have no seq: they neither move lastSeq nor count as messages.
      if (m.type === "summary") return void options.onSummary?.(m);
      if (m.type === "presence") return options.onPresence?.(m);
      if (m.type !== "message" || !(m.seq > lastSeq)) return; // a replay overlap: already delivered
      lastSeq = m.seq;
      attempt = 0;
      onMessage(m);
    };
    // A text frame is one message, or (packed frames, `?batch=1`) an array of them in seq order,
    // handed to the application one by one.
    const deliver = (text: string) => {
      let parsed: Message | Summary | PresenceFrame | (Message | Summary | PresenceFrame)[];
      try {
        parsed = JSON.parse(text) as Message | Summary | PresenceFrame | (Message | Summary | PresenceFrame)[];
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
      const wait = this.jitter(this.backoff(attempt++));
      void this.sleep(wait).then(connect);
    };

    // The server ended the subscription because `used` expired: not a failure of the connection, so
    // it resumes at once with a fresh token and the same `?after=`, and the application is not told.
    // Without a refresh token (or when the refresh fails) it is an ordinary disconnect.
    const renew = (used: string | undefined) => {
      current = null;
      if (closed) return;
      const expired = new FloodgateError(401, "unauthenticated", "subscription token expired");
      if (!this.refreshToken) return reconnect(expired);
      const fresh = this.accessToken !== used ? Promise.resolve() : this.refreshOnce();
      fresh.then(connect, (e: unknown) => reconnect(e));
    };

    const connect = async () => {
      if (closed) return;
      await this.freshToken().catch(() => {});
      const query = new URLSearchParams();
      // Resume from the last seq (or the position the server gave, when further); with an explicit
      // `after` (even 0) the first connect replays too.
      const resume = lastSeq > 0 || options.after !== undefined || position !== null;
      const after = Math.max(lastSeq, position ?? 0);
      if (resume) query.set("after", String(after));
      if (options.onPresence) query.set("presence", "1");
      const qs = query.toString() ? `?${query}` : "";
      // WebSockets ask for packed frames: fewer sends per message for the relay, same messages here.
      const wsQuery = new URLSearchParams(query);
      wsQuery.set("batch", "1");
      // The token goes in a header or subprotocol, never the URL (URLs land in request logs). With a
      // token the subscribe is charged to its subject's budget, else to this client's IP.
      const token = this.accessToken;
      if (transport === "websocket") {
        const open = this.opts.openWebSocket ?? defaultOpenWebSocket;
        try {
          const ws = await open(
            `${this.baseUrl.replace(/^http/, "ws")}/v1/subscribe/${channel}?${wsQuery}`,
            token ? [WS_PROTOCOL, `${WS_BEARER_PREFIX}${token}`] : [WS_PROTOCOL],
          );
          wsFailures = 0;
          if (closed) return ws.close(1000, "closed");
          current = ws;
          states.set("live");
          ws.addEventListener("message", (ev) => {
            if (typeof ev.data === "string") deliver(ev.data);
          });
          let gone = false;
          const lost = (ev?: { code?: number }) => {
            if (gone) return;
            gone = true;
            if (ev?.code === TOKEN_EXPIRED_CLOSE) renew(token);
            else reconnect(new FloodgateError(0, "network", "WebSocket closed"));
          };
          ws.addEventListener("close", lost);
          ws.addEventListener("error", lost);
        } catch (e) {
          wsFailures++;
          if (options.transport !== "websocket" && wsFailures >= 3) transport = "sse";
          reconnect(e);
        }
        return;
      }
      const abort = new AbortController();
      current = { close: () => abort.abort() };
      try {
        const res = await this.fetchFn(`${this.baseUrl}/v1/subscribe/${channel}${qs}`, {
          headers: {
            accept: "text/event-stream",
            ...(token ? { authorization: `Bearer ${token}` } : {}),
            ...(resume ? { "last-event-id": String(after) } : {}),
          },
          signal: abort.signal,
        });
        if (res.status !== 200 || !res.body) throw await toError(res);
        states.set("live");
        let expired = false;
        await readSse(res.body, (event) => {
          if (event.event === "expired") {
            expired = true;
            deliver(event.data); // its `seq`: where to resume
            return false;
          }
          deliver(event.data);
        });
        if (expired) renew(token);
        else reconnect(new FloodgateError(0, "network", "event stream ended"));
      } catch (e) {
        if (!closed) reconnect(e);
      }
    };

    void connect();
    return {
      get lastSeq() {
        return lastSeq;
      },
      get transport() {
        return transport;
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

  /** Refreshes first when the access token expires within `refreshMarginMs`. */
  private async freshToken(): Promise<void> {
    if (!this.refreshToken || !this.accessToken) return;
    const exp = expiresAt(this.accessToken);
    if (exp === null || exp * 1000 - this.now() > (this.opts.refreshMarginMs ?? 30_000)) return;
    await this.refreshOnce();
  }

  /** One refresh at a time: callers that ask while one is under way wait for it. */
  private refreshOnce(): Promise<void> {
    this.refreshing ??= this.refresh().then(
      () => {
        this.refreshing = null;
      },
      (e) => {
        this.refreshing = null;
        throw e;
      },
    );
    return this.refreshing;
  }

  private maxBackoff(): number {
    return this.opts.maxBackoffMs ?? 10_000;
  }

  /** Exponential: 250 ms, 500 ms, 1 s, … capped at maxBackoffMs. */
  private backoff(attempt: number): number {
    return Math.min(this.maxBackoff(), BASE_BACKOFF_MS * 2 ** attempt);
  }

  /** Adds up to 20% so many clients told the same Retry-After do not return in one wave. */
  private jitter(ms: number): number {
    return Math.round(ms * (1 + 0.2 * this.random()));
  }
}

async function toError(res: Response): Promise<FloodgateError> {
  let body: { code?: string; msg?: string; meta?: Record<string, string> } = {};
  try {
    body = (await res.json()) as typeof body;
  } catch {
    // not the API's error shape (a proxy in between): keep the status
  }
  const meta = body.meta ?? {};
  const message = body.msg ?? `HTTP ${res.status}`;
  if (res.status === 429) {
    const fromHeader = Number(res.headers.get("retry-after")) * 1000;
    const fromBody = Number(meta.retry_after_ms);
    const retryAfterMs = Math.max(
      Number.isFinite(fromHeader) ? fromHeader : 0,
      Number.isFinite(fromBody) ? fromBody : 0,
    );
    return new RateLimitedError(message, meta, retryAfterMs || 1000);
  }
  const code = (body.code as ErrorCode | undefined) ?? (res.status >= 500 ? "unavailable" : "invalid_argument");
  return new FloodgateError(res.status, code, message, meta);
}

/**
 * The transport a subscription starts on: SSE at once where `auto` has no WebSocket to use (Node 20
 * without `--experimental-websocket` and no `openWebSocket`), instead of failing three opens first.
 */
function initialTransport(
  asked: SubscribeOptions["transport"],
  openWebSocket: ClientOptions["openWebSocket"],
): "websocket" | "sse" {
  if (asked === "sse") return "sse";
  if (asked === "websocket" || openWebSocket) return "websocket";
  return typeof (globalThis as { WebSocket?: unknown }).WebSocket === "function" ? "websocket" : "sse";
}

/** A subscription's state: its changes told once each, and `ready` for its first `live`. */
function connectionStates(
  transport: () => "websocket" | "sse",
  onState: SubscribeOptions["onState"],
): { readonly current: ConnectionState; ready: Promise<void>; set(next: ConnectionState, reason?: unknown): void } {
  let current: ConnectionState = "connecting";
  let settle: { resolve: () => void; reject: (e: unknown) => void } | null = null;
  const ready = new Promise<void>((resolve, reject) => {
    settle = { resolve, reject };
  });
  // Nobody need await it: a subscription closed before it was live must not be an unhandled rejection.
  ready.catch(() => {});
  return {
    get current() {
      return current;
    },
    ready,
    set(next, reason) {
      if (next === current || current === "closed") return;
      const previous = current;
      current = next;
      if (next === "live") settle?.resolve();
      if (next === "closed") settle?.reject(new FloodgateError(0, "network", "subscription closed before it was live"));
      if (next === "live" || next === "closed") settle = null;
      const change: StateChange = { previous, transport: transport() };
      if (reason !== undefined) change.reason = reason;
      onState?.(next, change);
    },
  };
}

/** What {@link mintTokens} asks for (docs/api.md, `POST /v1/tokens`). */
export interface MintRequest {
  sub: string;
  channels: string[];
  /**
   * Default `["publish","subscribe"]`; `"priority"` allows `PublishOptions.priority: "high"`,
   * `"broadcast"` allows `PublishOptions.shard`.
   */
  scopes?: ("publish" | "subscribe" | "priority" | "broadcast")[];
  /** Access token lifetime, e.g. `"5m"` (default), at most `"24h"`. */
  ttl?: string;
  /** Refresh token lifetime, e.g. `"1h"` (default), at most `"7d"`. */
  refresh_ttl?: string;
  /** A publish budget for this token: `"10/s"` or `{rate, per, burst}`. */
  rl?: string | { rate: number; per: string; burst?: number };
  /** The token's group: its shard on channels sharded by group (1–32 characters of a-z 0-9 _ -). */
  group?: string;
}

export interface AdminContext {
  baseUrl: string;
  /** The server's `ADMIN_TOKEN`: only ever on a server, never in a browser. */
  adminToken: string;
  fetch?: (input: string, init?: RequestInit) => Promise<Response>;
}

/**
 * Mints a token pair from a server-side admin context (your backend, holding `ADMIN_TOKEN`), to hand
 * to a browser or device: `POST /v1/tokens`. Rejects with a {@link FloodgateError} (400 for a bad
 * request, 401 for a wrong admin token, 429 past the token-issue budget).
 */
export async function mintTokens(admin: AdminContext, request: MintRequest): Promise<TokenPair> {
  const fetchFn = admin.fetch ?? ((input, init) => fetch(input, init));
  const res = await fetchFn(`${admin.baseUrl.replace(/\/+$/, "")}/v1/tokens`, {
    method: "POST",
    headers: { authorization: `Bearer ${admin.adminToken}`, "content-type": "application/json" },
    body: JSON.stringify(request),
  });
  if (res.status !== 201) throw await toError(res);
  return (await res.json()) as TokenPair;
}

/**
 * Exchanges a refresh token for a new pair without a client (`POST /v1/tokens/refresh`; it needs no
 * admin token). A refresh token works once: a reuse revokes its chain (docs/api.md).
 */
export async function refreshTokens(
  context: { baseUrl: string; fetch?: AdminContext["fetch"] },
  refreshToken: string,
): Promise<TokenPair> {
  const fetchFn = context.fetch ?? ((input, init) => fetch(input, init));
  const res = await fetchFn(`${context.baseUrl.replace(/\/+$/, "")}/v1/tokens/refresh`, {
    method: "POST",
    headers: { "content-type": "application/json" },
    body: JSON.stringify({ refresh_token: refreshToken }),
  });
  if (res.status !== 200) throw await toError(res);
  return (await res.json()) as TokenPair;
}

/** One event of a server-sent event stream. */
export interface SseEvent {
  /** The event's `id:` (Floodgate sends the message's seq), if it has one. */
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

interface OpeningSocket extends SocketLike {
  addEventListener(
    type: "open" | "message" | "close" | "error",
    fn: (ev: { data: unknown } & { code?: number }) => void,
  ): void;
}

/** The subprotocol Floodgate answers, and the prefix of the one that carries the token (docs/api.md). */
const WS_PROTOCOL = "floodgate";
const WS_BEARER_PREFIX = "bearer.";

function defaultOpenWebSocket(url: string, protocols: string[]): Promise<SocketLike> {
  const WS = (globalThis as unknown as { WebSocket?: new (url: string, protocols: string[]) => OpeningSocket })
    .WebSocket;
  if (!WS) return Promise.reject(new Error("no WebSocket in this runtime"));
  return new Promise((resolve, reject) => {
    const ws = new WS(url, protocols);
    ws.addEventListener("error", () => reject(new Error("WebSocket failed to open")));
    ws.addEventListener("open", () => resolve(ws));
  });
}

/** The `exp` claim (epoch seconds) of a JWT, read without verifying it, or null. */
function expiresAt(token: string): number | null {
  try {
    const payload = token.split(".")[1] ?? "";
    const json = atob(payload.replace(/-/g, "+").replace(/_/g, "/"));
    const exp = (JSON.parse(json) as { exp?: unknown }).exp;
    return typeof exp === "number" ? exp : null;
  } catch {
    return null;
  }
}

function randomKey(): string {
  return crypto.randomUUID();
}
