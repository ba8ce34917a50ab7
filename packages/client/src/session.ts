/**
 * A client's session with one server, shared by its publishes and subscriptions: the base URL, the
 * token pair and its refresh (one at a time), and the waits between attempts.
 */
import { FloodgateError, toError } from "./errors.js";
import type { ClientOptions } from "./options.js";
import { expiresAt, type TokenPair } from "./tokens.js";

const BASE_BACKOFF_MS = 250;

export class Session {
  readonly baseUrl: string;
  accessToken: string | undefined;
  refreshToken: string | undefined;
  private refreshing: Promise<void> | null = null;
  readonly opts: ClientOptions;
  readonly fetchFn: (input: string, init?: RequestInit) => Promise<Response>;
  readonly sleep: (ms: number) => Promise<void>;
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

  /** Refreshes first when the access token expires within `refreshMarginMs`. */
  async freshToken(): Promise<void> {
    if (!this.refreshToken || !this.accessToken) return;
    const exp = expiresAt(this.accessToken);
    if (exp === null || exp * 1000 - this.now() > (this.opts.refreshMarginMs ?? 30_000)) return;
    await this.refreshOnce();
  }

  /** One refresh at a time: callers that ask while one is under way wait for it. */
  refreshOnce(): Promise<void> {
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

  maxBackoff(): number {
    return this.opts.maxBackoffMs ?? 10_000;
  }

  /** Exponential: 250 ms, 500 ms, 1 s, … capped at maxBackoffMs. */
  backoff(attempt: number): number {
    return Math.min(this.maxBackoff(), BASE_BACKOFF_MS * 2 ** attempt);
  }

  /** Adds up to 20% so many clients told the same Retry-After do not return in one wave. */
  jitter(ms: number): number {
    return Math.round(ms * (1 + 0.2 * this.random()));
  }
}
