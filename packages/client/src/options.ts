/** What a `FloodgateClient` is created with. */
import type { TokenPair } from "./tokens.js";
import type { SocketLike } from "./websocket.js";

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
