/**
 * Token mint and refresh (docs/api.md, Tokens). Both are gated first by the token-issue budget keyed
 * by client IP, before anything in the request is verified. A refresh chain ends SESSION_TTL after its
 * first mint, and reusing a spent refresh token revokes the chain (src/refresh-ledger/refresh-ledger.ts).
 */
import { Hono } from "hono";
import { createMiddleware } from "hono/factory";
import * as z from "zod";
import { tokenIssueBudget } from "../../limiter/budgets";
import { refreshLedgerStub, revokedSessionsStub } from "../../platform/stubs";
import { DurationError, parseDuration } from "../../settings/durations";
import { LimitError, type LimitJson, limitToJson, parseLimit } from "../../settings/limits";
import { GROUP_NAME, GROUP_RULE } from "../../settings/shards";
import { GrammarError, parsePattern, whyNeverMatches } from "../../wire/channel-names";
import { invalidArgument, unauthenticated } from "../../wire/errors";
import type { AppEnv } from "../app-env";
import { adminAuth, tokenSecret } from "../auth/authorise";
import { revokedSessions } from "../auth/revoked-sessions";
import {
  DEFAULT_SCOPES,
  MAX_TOKEN_LENGTH,
  SCOPES,
  type Scope,
  signToken,
  type TokenClaims,
  TokenError,
  TokenTooLargeError,
  verifyToken,
} from "../auth/tokens";
import { orUnavailable } from "../http/errors";
import { ADMIN_ONLY, documented, errors, json, route } from "../http/openapi";
import { clientIp } from "../http/params";
import { bodyObject, custom, jsonBody } from "../http/validation";

const MAX_TOKEN_BODY = 16 * 1024;
const SUB = /^[A-Za-z0-9_.:@-]{1,128}$/;
const DAY_MS = 86_400_000;

export interface MintRequest {
  sub: string;
  channels: string[];
  scopes: Scope[];
  ttlSeconds: number;
  refreshTtlSeconds: number;
  rl?: LimitJson;
  /** The token's group (claim `grp`). */
  group?: string;
}

/** A duration field in whole seconds: at least 1s, at most `maxText`; `fallback` when absent. */
function durationField(name: string, fallback: string, maxMs: number, maxText: string) {
  return z
    .string({ error: `${name} must be a duration string such as "5m"` })
    .optional()
    .transform((text, ctx) => {
      let ms: number;
      try {
        ms = parseDuration(text ?? fallback, { allowDays: true });
      } catch (e) {
        if (!(e instanceof DurationError)) throw e;
        ctx.addIssue(custom(`${name}: ${e.message}`, text));
        return z.NEVER;
      }
      if (!(ms >= 1000)) ctx.addIssue(custom(`${name} must be at least 1s`, text));
      else if (ms > maxMs) ctx.addIssue(custom(`${name} must be at most ${maxText}`, text));
      return Math.floor(ms / 1000);
    })
    .openapi({
      description: `Default ${fallback}, at most ${maxText}; parts ms, s, m, h, d (\`1h30m\`).`,
      example: fallback,
    });
}

const SUB_RULE = "sub must be 1-128 characters of A-Z a-z 0-9 _ . : @ -";
const CHANNEL_LIST = "channels must be a list of 1 to 32 channel patterns";
const SCOPE_LIST = `scopes must be a list of ${SCOPES.map((s) => `"${s}"`).join(", ")}`;

/** The mint body (docs/api.md, Tokens), checked field by field in this order. */
export const MintBody = bodyObject(
  {
    sub: z.string({ error: SUB_RULE }).regex(SUB, { error: SUB_RULE }).openapi({ example: "alice" }),
    channels: z
      .array(
        z.string({ error: "channels must be strings" }).superRefine((p, ctx) => {
          let problem: string | null;
          try {
            problem = whyNeverMatches(parsePattern(p));
          } catch (e) {
            if (!(e instanceof GrammarError)) throw e;
            problem = e.message;
          }
          if (problem) ctx.addIssue(custom(`channels: ${p}: ${problem}`, p));
        }),
        { error: CHANNEL_LIST },
      )
      .min(1, { error: CHANNEL_LIST })
      .max(32, { error: CHANNEL_LIST })
      .openapi({
        description: "Channel patterns (docs/api.md, Channels); one that no channel name can match is refused.",
        example: ["public:live.reactions"],
      }),
    scopes: z
      .array(z.enum(SCOPES, { error: SCOPE_LIST }), { error: SCOPE_LIST })
      .optional()
      .transform((list): Scope[] => (list ? [...new Set(list)] : [...DEFAULT_SCOPES]))
      .openapi({
        description:
          'Default ["publish","subscribe"]. "priority" lets a publish with `Floodgate-Priority: high` pass the throttle (docs/api.md, "Priority messages"); "broadcast" lets a publish name its shard or every shard with `Floodgate-Shard` (docs/api.md, "Shards"). Neither is granted unless asked for.',
      }),
    group: z
      .string({ error: GROUP_RULE })
      .regex(GROUP_NAME, { error: GROUP_RULE })
      .optional()
      .openapi({ description: 'The token\'s shard on channels sharded {"by":"group"} (claim `grp`).', example: "es" }),
    ttl: durationField("ttl", "5m", DAY_MS, "24h"),
    refresh_ttl: durationField("refresh_ttl", "1h", 7 * DAY_MS, "7d"),
    rl: z
      .unknown()
      .transform((value, ctx): LimitJson => {
        try {
          const limit = parseLimit(value);
          if (!limit) throw new LimitError("rl must not be disabled (a rate of 0)");
          return limitToJson(limit);
        } catch (e) {
          if (!(e instanceof LimitError)) throw e;
          ctx.addIssue(custom(`rl: ${e.message}`, value));
          return z.NEVER;
        }
      })
      .optional()
      .openapi({
        description: 'A publish budget override: shorthand ("10/s") or {"rate","per","burst"}.',
        oneOf: [{ type: "string", example: "10/s" }, { $ref: "#/components/schemas/Limit" }],
      }),
  },
  "body must be a JSON object",
)
  .openapi("MintRequest")
  .transform(
    (b): MintRequest => ({
      sub: b.sub,
      channels: b.channels,
      scopes: b.scopes,
      ttlSeconds: b.ttl,
      refreshTtlSeconds: b.refresh_ttl,
      ...(b.rl ? { rl: b.rl } : {}),
      ...(b.group ? { group: b.group } : {}),
    }),
  );

/** The refresh body (docs/api.md, Tokens). */
export const RefreshBody = bodyObject(
  {
    refresh_token: z.string({ error: "refresh_token is required" }).min(1, { error: "refresh_token is required" }),
  },
  "body must be a JSON object",
).openapi("RefreshRequest");

const TokenPair = z
  .object({
    access_token: z.string(),
    refresh_token: z.string(),
    expires_at: z.number().int().openapi({ description: "Epoch seconds." }),
    refresh_expires_at: z.number().int().openapi({ description: "Epoch seconds." }),
  })
  .openapi("TokenPair");

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
    ...(req.group ? { grp: req.group } : {}),
  };
  const access: TokenClaims = {
    ...common,
    typ: "access",
    exp: Math.min(nowSeconds + req.ttlSeconds, session.endsAt),
    jti: crypto.randomUUID(),
    // Its session: when the session is revoked, this token is refused and its subscriptions end.
    sid: session.id,
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

tokens.use(
  "*",
  createMiddleware<AppEnv>(async (c, next) => {
    const budget = tokenIssueBudget(c.var.svc.config, clientIp(c.req.raw));
    const headers = await c.var.svc.gate.check("token-issue", budget.key, budget.limit, c.var.defer);
    await next();
    for (const [k, v] of Object.entries(headers)) c.res.headers.set(k, v);
  }),
);

/** Token routes fail closed before reading anything when TOKEN_SECRET is missing or weak. */
const secretRequired = createMiddleware<AppEnv>(async (c, next) => {
  tokenSecret(c.env);
  await next();
});

const mintRoute = route({
  method: "post",
  path: "/",
  summary: "Mint an access/refresh token pair",
  description: "Gated first by the token-issue budget (client IP). Neither token outlives SESSION_TTL.",
  security: ADMIN_ONLY,
  request: {
    body: { ...json(MintBody, "The token's subject, channels, scopes, lifetimes and budget."), required: true },
  },
  responses: { 201: json(TokenPair, "The pair."), ...errors(400, 401, 413, 429, 500) },
});

tokens.post(documented(tokens, mintRoute), adminAuth, secretRequired, jsonBody(MintBody, MAX_TOKEN_BODY), async (c) => {
  const req = c.req.valid("json");
  const now = Math.floor(Date.now() / 1000);
  const session = { id: crypto.randomUUID(), startedAt: now, endsAt: now + c.var.svc.config.sessionTtlSeconds };
  return c.json(await issuePair(tokenSecret(c.env), req, now, session), 201);
});

/**
 * A reused refresh token revoked its session: its access tokens end too (docs/security.md, "A revoked
 * session ends"). Refused in this isolate at once; listed for every other isolate and relay until
 * `untilSeconds`, when the longest access token the session can hold (issued at the latest now, for
 * its chain's `ttl`) has expired. A list that cannot be written is logged: the chain stays revoked.
 */
async function revokeAccess(env: Env, sid: string, untilSeconds: number, nowSeconds: number): Promise<void> {
  revokedSessions.add(sid);
  try {
    await revokedSessionsStub(env).revokeSession(sid, untilSeconds, nowSeconds);
  } catch (e) {
    console.error("floodgate: could not list a revoked session", e instanceof Error ? e.message : e);
  }
}

const refreshRoute = route({
  method: "post",
  path: "/refresh",
  summary: "Trade a refresh token for a new pair",
  description:
    "A refresh token works once; presenting a spent one answers 401 and revokes its whole chain. " +
    "Gated first by the token-issue budget (client IP).",
  request: { body: { ...json(RefreshBody, "The refresh token."), required: true } },
  responses: { 200: json(TokenPair, "The new pair."), ...errors(400, 401, 413, 429, 500, 503) },
});

tokens.post(documented(tokens, refreshRoute), secretRequired, jsonBody(RefreshBody, MAX_TOKEN_BODY), async (c) => {
  const secret = tokenSecret(c.env);
  const { refresh_token } = c.req.valid("json");
  const now = Math.floor(Date.now() / 1000);
  let claims: TokenClaims;
  try {
    claims = (await verifyToken(refresh_token, secret, "refresh", now)).claims;
  } catch (e) {
    if (e instanceof TokenError) throw unauthenticated(e.message);
    throw e;
  }
  // Tokens minted before chains existed are their own chain, started when they were issued.
  const startedAt = typeof claims.sst === "number" ? claims.sst : claims.iat;
  const session: Session = {
    id: typeof claims.sid === "string" ? claims.sid : claims.jti,
    startedAt,
    endsAt: startedAt + c.var.svc.config.sessionTtlSeconds,
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
      ...(claims.grp ? { group: claims.grp } : {}),
    },
    now,
    session,
  );
  const ledger = refreshLedgerStub(c.env, claims.sub);
  const outcome = await orUnavailable("refresh ledger", () =>
    ledger.spend(claims.jti, session.id, claims.exp, session.endsAt, now),
  );
  if (outcome === "reused") {
    await revokeAccess(c.env, session.id, Math.min(session.endsAt, now + ttlSeconds), now);
    throw unauthenticated("refresh token was already used; every token of its session is revoked");
  }
  if (outcome === "revoked") throw unauthenticated("session was revoked: one of its refresh tokens was used twice");
  return c.json(pair, 200);
});
