/**
 * Who may make a request: bearer tokens, access-token checks (signature, expiry, scope, channel) and
 * the admin bearer middleware (docs/api.md, Tokens and Operator routes; docs/security.md). Each
 * failure is an ApiError in the API's error shape (docs/api.md).
 */
import { bearerAuth } from "hono/bearer-auth";
import { createMiddleware } from "hono/factory";
import { adminAuthBudget } from "../../limiter/budgets";
import { type SecretName, secretProblem } from "../../settings/secrets";
import { settingsOf } from "../../settings/settings";
import { anyPatternMatches, type ChannelName } from "../../wire/channel-names";
import { ApiError, permissionDenied, unauthenticated } from "../../wire/errors";
import type { AppEnv } from "../app-env";
import { apiErrorResponse } from "../http/errors";
import { clientIp } from "../http/params";
import { revokedSessions } from "./revoked-sessions";
import { type Scope, TokenError, type VerifiedToken, verifyToken } from "./tokens";

/** The bearer token in `Authorization`, or null. */
export function bearer(request: Request): string | null {
  const h = request.headers.get("authorization");
  if (!h) return null;
  const m = /^Bearer[ ]+(\S+)\s*$/i.exec(h);
  return m ? (m[1] as string) : null;
}

/** A secret the route needs, or a 500 naming it when it is missing or weak (fail closed). */
function requiredSecret(env: Env, name: SecretName): string {
  const value = (env as unknown as Record<string, unknown>)[name];
  const problem = secretProblem(name, value);
  if (problem) {
    console.error(`floodgate: ${problem}; the routes that need it fail closed`);
    throw new ApiError("internal", `server is not configured: ${problem}`, { variable: name });
  }
  return value as string;
}

/** The token secret, or a 500 when it is missing or weak (token routes fail closed). */
export function tokenSecret(env: Env): string {
  return requiredSecret(env, "TOKEN_SECRET");
}

/** What a request without a token is told: how to get one. */
export const MISSING_BEARER =
  "missing bearer token: send Authorization: Bearer <access token>; get one with POST /v1/tokens and the admin token (docs/api.md, Tokens)";

/** What an admin route refuses a request with: which token it wants. */
export const ADMIN_BEARER_REQUIRED =
  "admin bearer token required: send Authorization: Bearer <ADMIN_TOKEN> (the server's secret; docs/api.md, Operator routes)";

/**
 * What a request that presents the admin token where an access token goes is told: the newcomer's
 * first mistake ("malformed token" said nothing about why), with how to mint one.
 */
export const ADMIN_TOKEN_AS_ACCESS =
  "this is the admin token: it mints tokens and calls /v1/admin, but publishing and private channels take an access token. Mint one with POST /v1/tokens and the admin token, e.g. " +
  `curl -X POST <server>/v1/tokens -H "Authorization: Bearer <ADMIN_TOKEN>" -d '{"sub":"me","channels":["public:live.*"]}' (docs/api.md, Tokens)`;

/** Whether `token` is the admin token, compared in constant time (it is a secret). */
function isAdminToken(env: Env, token: string): boolean {
  const admin = (env as unknown as Record<string, unknown>).ADMIN_TOKEN;
  if (typeof admin !== "string" || admin.length === 0) return false;
  const a = new TextEncoder().encode(token);
  const b = new TextEncoder().encode(admin);
  return a.byteLength === b.byteLength && crypto.subtle.timingSafeEqual(a, b);
}

/** What a token of a revoked session is answered (401). */
export const SESSION_REVOKED =
  "session revoked: one of its refresh tokens was used twice; mint a new token pair (docs/security.md)";

/**
 * Verifies an access token: signature, shape, expiry, type, and that its session (`sid`) is not
 * revoked (src/worker/auth/revoked-sessions.ts). @throws ApiError 401
 */
export async function verifyAccess(env: Env, token: string | null): Promise<VerifiedToken> {
  const secret = tokenSecret(env);
  if (!token) throw unauthenticated(MISSING_BEARER);
  try {
    const verified = await verifyToken(token, secret, "access", Math.floor(Date.now() / 1000));
    const sid = verified.claims.sid;
    if (sid !== undefined && (await revokedSessions.has(env, sid))) throw unauthenticated(SESSION_REVOKED);
    return verified;
  } catch (e) {
    if (e instanceof TokenError) {
      // Only a token that is no JWT at all can be the admin token: a signed one never pays the compare.
      if (e.failure === "malformed" && isAdminToken(env, token)) throw unauthenticated(ADMIN_TOKEN_AS_ACCESS);
      throw unauthenticated(e.message);
    }
    throw e;
  }
}

/**
 * Whether a token's patterns grant `channel`. The record's channel (`recordChannel`, ANALYTICS_CHANNEL)
 * only to a pattern that is its very name (docs/security.md, "The record of dropped messages"): it
 * holds the drops and publishers of every channel, so a wildcard meant for other channels
 * (`private:*.*.*`) must not read it by accident.
 */
export function patternsGrant(verified: VerifiedToken, channel: ChannelName, recordChannel: string): boolean {
  if (channel.name === recordChannel) return verified.patterns.some((p) => p.source === channel.name);
  return anyPatternMatches(verified.patterns, channel);
}

/** Whether a verified token grants `scope` on `channel` (with {@link patternsGrant}'s rule for the record's channel). */
export function grants(verified: VerifiedToken, scope: Scope, channel: ChannelName, recordChannel: string): boolean {
  return verified.claims.scp.includes(scope) && patternsGrant(verified, channel, recordChannel);
}

/** Checks that a verified token grants `scope` on `channel`. @throws ApiError 403 */
export function checkGrant(verified: VerifiedToken, scope: Scope, channel: ChannelName, recordChannel: string): void {
  if (!verified.claims.scp.includes(scope)) throw permissionDenied(`token lacks the "${scope}" scope`);
  if (!patternsGrant(verified, channel, recordChannel)) {
    const literal = channel.name === recordChannel ? " (the record's channel is granted by its literal name only)" : "";
    throw permissionDenied(`token does not grant channel ${channel.name}${literal}`);
  }
}

/** Verifies an access token and checks scope and channel. @throws ApiError 401 / 403 */
export async function authorise(
  env: Env,
  token: string | null,
  scope: Scope,
  channel: ChannelName,
): Promise<VerifiedToken> {
  const verified = await verifyAccess(env, token);
  checkGrant(verified, scope, channel, settingsOf(env).analyticsChannel.name);
  return verified;
}

/**
 * The admin bearer (docs/api.md, Operator routes): Hono's `bearerAuth`, which compares in constant
 * time, answering the 401 of docs/api.md for a missing, malformed or wrong token. Fails closed first:
 * with `ADMIN_TOKEN` unset or weak every admin route answers 500 naming it, whatever was sent.
 * Then the client's `admin-auth` budget (docs/security.md, "Guessing the admin token"): every request
 * takes a token before its bearer is compared, through the gate like any charge, so the bucket is
 * strict however many guesses arrive at once; an empty bucket answers 429 before the comparison, so
 * a right guess cannot be told from a wrong one. A wrong bearer keeps its token spent (the 401 carries
 * the bucket's headers); a right one gives it back off the response path, so good requests end up
 * uncharged.
 */
export const adminAuth = createMiddleware<AppEnv>(async (c, next) => {
  const token = requiredSecret(c.env, "ADMIN_TOKEN");
  const { gate, config } = c.var.svc;
  const budget = adminAuthBudget(config, clientIp(c.req.raw));
  const headers = await gate.check("admin-auth", budget.key, budget.limit, c.var.defer);
  const refused = () => {
    const res = apiErrorResponse(unauthenticated(ADMIN_BEARER_REQUIRED));
    for (const [k, v] of Object.entries(headers)) res.headers.set(k, v);
    return res;
  };
  const check = bearerAuth<AppEnv>({
    token,
    noAuthenticationHeader: { message: refused },
    invalidAuthenticationHeader: { message: refused },
    invalidToken: { message: refused },
  });
  return check(c, async () => {
    c.var.defer(gate.refund("admin-auth", budget.key, budget.limit));
    await next();
  });
});
