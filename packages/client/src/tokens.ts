/** Token pairs: minting one from an admin context, refreshing one without a client, reading `exp`. */
import { toError } from "./errors.js";

export interface TokenPair {
  access_token: string;
  refresh_token: string;
  expires_at: number;
  refresh_expires_at: number;
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

/** The `exp` claim (epoch seconds) of a JWT, read without verifying it, or null. */
export function expiresAt(token: string): number | null {
  try {
    const payload = token.split(".")[1] ?? "";
    const json = atob(payload.replace(/-/g, "+").replace(/_/g, "/"));
    const exp = (JSON.parse(json) as { exp?: unknown }).exp;
    return typeof exp === "number" ? exp : null;
  } catch {
    return null;
  }
}
