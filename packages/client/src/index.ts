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
 *   With `maxRate` (`"5/s"`) it takes at most that rate (`?max_rate=`), and `onSkipped` hears what it skipped.
 * - `manifest()` reads the deployment's effective settings (`GET /v1/manifest`, no token needed): the
 *   budgets, `messages.max_bytes` (the largest body `publish` may send), history kept, and the rest.
 * - Tokens are refreshed shortly before the access token expires (and once after a 401). A
 *   subscription the server ends because its token expired (WebSocket close 4001, SSE
 *   `event: expired`) is refreshed and resumed at once, without telling `onError`, from the
 *   position that last frame gives (so a quiet subscription misses nothing published meanwhile).
 * - Errors are typed after the API's error codes (docs/api.md): {@link FloodgateError} with `code`, `metaCode`,
 *   `status` (a 503's reason, `Floodgate-Refusal`, as `refusal`); {@link RateLimitedError} carries `retryAfterMs`.
 */

// The package's entry: what it exports, each from the module that owns it.
export { FloodgateClient, type PresenceAnswer } from "./client.js";
export type { ConnectionState, StateChange } from "./connection-state.js";
export { type ErrorCode, FloodgateError, RateLimitedError } from "./errors.js";
export type { Message, PresenceFrame, SkippedSummary, Summary } from "./frames.js";
export type { Manifest, ManifestLimit, ManifestTarget } from "./manifest.js";
export type { ClientOptions } from "./options.js";
export type { BroadcastResult, PublishOptions, PublishResult } from "./publish.js";
export { readSse, type SseEvent } from "./sse.js";
export type { SubscribeOptions, Subscription } from "./subscribe.js";
export { type AdminContext, type MintRequest, mintTokens, refreshTokens, type TokenPair } from "./tokens.js";
export type { SocketLike } from "./websocket.js";
