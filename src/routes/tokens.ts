/**
 * Token mint and refresh (docs/api.md, Tokens). Both are gated first by the token-issue budget keyed
 * by client IP, before anything in the request is verified. A refresh chain ends SESSION_TTL after its
 * first mint, and reusing a spent refresh token revokes the chain (src/refresh-ledger.ts).
 */
import { Hono } from "hono";
import type { AppEnv } from "../app-env";
import { tokenIssueBudget } from "../budgets";
import { GrammarError, parsePattern } from "../channels";
import { DurationError, parseDuration } from "../durations";
import { invalidArgument, orUnavailable, unauthenticated } from "../errors";
import { clientIp, readJson, requireAdmin, tokenSecret } from "../http";
import { LimitError, type LimitJson, limitToJson, parseLimit } from "../limits";
import { refreshLedgerStub } from "../stubs";
import {
  MAX_TOKEN_LENGTH,
  SCOPES,
  type Scope,
  signToken,
  type TokenClaims,
  TokenError,
  TokenTooLargeError,
  verifyToken,
} from "../tokens";

const MAX_TOKEN_BODY = 16 * 1024;
const SUB = /^[A-Za-z0-9_.:@-]{1,128}$/;
const MINT_FIELDS = new Set(["sub", "channels", "scopes", "ttl", "refresh_ttl", "rl"]);
const DAY_MS = 86_400_000;

export interface MintRequest {
  sub: string;
  channels: string[];
  scopes: Scope[];
  ttlSeconds: number;
  refreshTtlSeconds: number;
  rl?: LimitJson;
}

function duration(value: unknown, name: string, fallback: string, maxMs: number, maxText: string): number {
  const text = value === undefined ? fallback : value;
  if (typeof text !== "string") throw invalidArgument(`${name} must be a duration string such as "5m"`);
  let ms: number;
  try {
    ms = parseDuration(text, { allowDays: true });
  } catch (e) {
    if (e instanceof DurationError) throw invalidArgument(`${name}: ${e.message}`);
    throw e;
  }
  if (!(ms >= 1000)) throw invalidArgument(`${name} must be at least 1s`);
  if (ms > maxMs) throw invalidArgument(`${name} must be at most ${maxText}`);
  return Math.floor(ms / 1000);
}

/** Validates a mint body (docs/api.md, Tokens). @throws ApiError 400 */
export function parseMintRequest(body: unknown): MintRequest {
  if (body === null || typeof body !== "object" || Array.isArray(body))
    throw invalidArgument("body must be a JSON object");
  const b = body as Record<string, unknown>;
  for (const k of Object.keys(b)) if (!MINT_FIELDS.has(k)) throw invalidArgument(`unknown field "${k}"`);
  if (typeof b.sub !== "string" || !SUB.test(b.sub)) {
    throw invalidArgument("sub must be 1-128 characters of A-Z a-z 0-9 _ . : @ -");
  }
  if (!Array.isArray(b.channels) || b.channels.length < 1 || b.channels.length > 32) {
    throw invalidArgument("channels must be a list of 1 to 32 channel patterns");
  }
  for (const p of b.channels) {
    if (typeof p !== "string") throw invalidArgument("channels must be strings");
    try {
      parsePattern(p);
    } catch (e) {
      if (e instanceof GrammarError) throw invalidArgument(`channels: ${p}: ${e.message}`);
      throw e;
    }
  }
  let scopes: Scope[] = [...SCOPES];
  if (b.scopes !== undefined) {
    if (!Array.isArray(b.scopes) || b.scopes.some((s) => !SCOPES.includes(s as Scope))) {
      throw invalidArgument('scopes must be a list of "publish" and "subscribe"');
    }
    scopes = [...new Set(b.scopes as Scope[])];
  }
  const ttlSeconds = duration(b.ttl, "ttl", "5m", DAY_MS, "24h");
  const refreshTtlSeconds = duration(b.refresh_ttl, "refresh_ttl", "1h", 7 * DAY_MS, "7d");
  let rl: LimitJson | undefined;
  if (b.rl !== undefined) {
    try {
      const limit = parseLimit(b.rl);
      if (!limit) throw new LimitError("rl must not be disabled (a rate of 0)");
      rl = limitToJson(limit);
    } catch (e) {
      if (e instanceof LimitError) throw invalidArgument(`rl: ${e.message}`);
      throw e;
    }
  }
  return { sub: b.sub, channels: b.channels as string[], scopes, ttlSeconds, refreshTtlSeconds, ...(rl ? { rl } : {}) };
}

/** A refresh chain: every pair refreshed from one mint shares it (docs/api.md, Tokens). */
export interface Session {
  /** The chain's id, shared by its refresh tokens; reusing any of them revokes it. */
  id: string;
  /** When its first pair was minted, epoch seconds. */
  startedAt: number;
  /** Start + SESSION_TTL, epoch seconds: no token of the chain outlives it. */
  endsAt: number;
}

/**
 * Signs an access/refresh pair, neither outliving the session.
 * @throws ApiError 400 when a token would be longer than any route accepts (it could never be used).
 */
export async function issuePair(secret: string, req: MintRequest, nowSeconds: number, session: Session) {
  const common = {
    sub: req.sub,
    chs: req.channels,
    scp: req.scopes,
    iat: nowSeconds,
    ...(req.rl ? { rl: req.rl } : {}),
  };
  const access: TokenClaims = {
    ...common,
    typ: "access",
    exp: Math.min(nowSeconds + req.ttlSeconds, session.endsAt),
    jti: crypto.randomUUID(),
  };
  const refresh: TokenClaims = {
    ...common,
    typ: "refresh",
    exp: Math.min(nowSeconds + req.refreshTtlSeconds, session.endsAt),
    jti: crypto.randomUUID(),
    // Remembered so that a refreshed pair keeps the access lifetime it was minted with.
    ttl: req.ttlSeconds,
    sid: session.id,
    sst: session.startedAt,
  };
  try {
    return {
      access_token: await signToken(access, secret),
      refresh_token: await signToken(refresh, secret),
      expires_at: access.exp,
      refresh_expires_at: refresh.exp,
    };
  } catch (e) {
    if (e instanceof TokenTooLargeError) {
      throw invalidArgument(`${e.message}; use fewer or shorter channel patterns`, {
        limit: "max_token_length",
        max_token_length: String(MAX_TOKEN_LENGTH),
      });
    }
    throw e;
  }
}

export const tokens = new Hono<AppEnv>();

tokens.use("*", async (c, next) => {
  const svc = c.get("svc");
  const budget = tokenIssueBudget(svc.config, clientIp(c.req.raw));
  const headers = await svc.gate.check("token-issue", budget.key, budget.limit, (p) => c.executionCtx.waitUntil(p));
  await next();
  for (const [k, v] of Object.entries(headers)) c.res.headers.set(k, v);
});

tokens.post("/", async (c) => {
  await requireAdmin(c.env, c.req.raw);
  const secret = tokenSecret(c.env);
  const req = parseMintRequest(await readJson(c.req.raw, MAX_TOKEN_BODY));
  const now = Math.floor(Date.now() / 1000);
  const session = { id: crypto.randomUUID(), startedAt: now, endsAt: now + c.get("svc").config.sessionTtlSeconds };
  return c.json(await issuePair(secret, req, now, session), 201);
});

tokens.post("/refresh", async (c) => {
  const secret = tokenSecret(c.env);
  const body = await readJson(c.req.raw, MAX_TOKEN_BODY);
  if (body === null || typeof body !== "object" || Array.isArray(body))
    throw invalidArgument("body must be a JSON object");
  const b = body as Record<string, unknown>;
  for (const k of Object.keys(b)) if (k !== "refresh_token") throw invalidArgument(`unknown field "${k}"`);
  if (typeof b.refresh_token !== "string" || b.refresh_token.length === 0) {
    throw invalidArgument("refresh_token is required");
  }
  const now = Math.floor(Date.now() / 1000);
  let claims: TokenClaims;
  try {
    claims = (await verifyToken(b.refresh_token, secret, "refresh", now)).claims;
  } catch (e) {
    if (e instanceof TokenError) throw unauthenticated(e.message);
    throw e;
  }
  // Tokens minted before chains existed are their own chain, started when they were issued.
  const startedAt = typeof claims.sst === "number" ? claims.sst : claims.iat;
  const session: Session = {
    id: typeof claims.sid === "string" ? claims.sid : claims.jti,
    startedAt,
    endsAt: startedAt + c.get("svc").config.sessionTtlSeconds,
  };
  if (!(now < session.endsAt)) throw unauthenticated("session has ended (SESSION_TTL); mint a new token pair");
  const ttlSeconds = typeof claims.ttl === "number" && claims.ttl > 0 ? claims.ttl : 300;
  // Signed before the token is spent: a pair that could not be issued must not use up the token.
  const pair = await issuePair(
    secret,
    {
      sub: claims.sub,
      channels: claims.chs,
      scopes: claims.scp,
      ttlSeconds,
      // The new refresh token lives as long as the old one was meant to, counted from now.
      refreshTtlSeconds: Math.max(1, claims.exp - claims.iat),
      ...(claims.rl ? { rl: claims.rl } : {}),
    },
    now,
    session,
  );
  const ledger = refreshLedgerStub(c.env, claims.sub);
  const outcome = await orUnavailable("refresh ledger", () =>
    ledger.spend(claims.jti, session.id, claims.exp, session.endsAt, now),
  );
  if (outcome === "reused") {
    throw unauthenticated("refresh token was already used; every token of its session is revoked");
  }
  if (outcome === "revoked") throw unauthenticated("session was revoked: one of its refresh tokens was used twice");
  return c.json(pair, 200);
});
