/**
 * HS256 JSON Web Tokens (docs/api.md, Tokens) on WebCrypto, which exists in workerd and in Node 22 alike.
 * The signature check is `crypto.subtle.verify`, which compares in constant time.
 */
import { BoundedMap } from "../../../functions/bounded-map";
import type { LimitJson } from "../../settings/limits";
import { GROUP_NAME } from "../../settings/shards";
import { type ChannelPattern, GrammarError, parsePattern } from "../../wire/channel-names";

export type TokenType = "access" | "refresh";
export type Scope = "publish" | "subscribe" | "priority" | "broadcast";
/** Every scope a mint may ask for. */
export const SCOPES: readonly Scope[] = ["publish", "subscribe", "priority", "broadcast"];
/**
 * What a mint without `scopes` grants. `priority` (publishes the throttle never drops, docs/api.md,
 * "Priority messages") and `broadcast` (docs/api.md, "Shards": `Floodgate-Shard`) are granted only
 * when asked for by name.
 */
export const DEFAULT_SCOPES: readonly Scope[] = ["publish", "subscribe"];

/** The claims Floodgate signs. Times are epoch seconds. */
export interface TokenClaims {
  sub: string;
  typ: TokenType;
  chs: string[];
  scp: Scope[];
  iat: number;
  exp: number;
  jti: string;
  rl?: LimitJson;
  /** The token's group: its shard on a channel sharded `{"by":"group"}` (docs/api.md, "Shards"). */
  grp?: string;
  /** Refresh tokens only: the access-token lifetime (seconds) that a refresh reissues. */
  ttl?: number;
  /**
   * The refresh chain (session) this token belongs to, for revocation: on refresh tokens, and on
   * access tokens minted since revocation reached them (docs/security.md, "A revoked session ends").
   */
  sid?: string;
  /** Refresh tokens only: when the chain's first pair was minted (epoch seconds); SESSION_TTL counts from it. */
  sst?: number;
}

/** A verified token with its channel patterns parsed once. */
export interface VerifiedToken {
  claims: TokenClaims;
  patterns: ChannelPattern[];
}

/** Why a token was refused; all of these are 401 `unauthenticated`. */
export type TokenFailure = "malformed" | "bad_signature" | "expired" | "not_yet_valid" | "wrong_type";

/**
 * How far in the future a token's `iat` may lie, in seconds: the clock skew between the data centres
 * that mint and verify. A later `iat` was not issued by this deployment's clock (a token signed ahead
 * of time with a leaked secret, or a clock gone wrong), so the token is refused.
 */
export const IAT_SKEW_SECONDS = 60;

export class TokenError extends Error {
  readonly failure: TokenFailure;
  constructor(failure: TokenFailure, message: string) {
    super(message);
    this.name = "TokenError";
    this.failure = failure;
  }
}

const encoder = new TextEncoder();
const decoder = new TextDecoder("utf-8", { fatal: true, ignoreBOM: false });
const HEADER = base64UrlEncode(encoder.encode(JSON.stringify({ alg: "HS256", typ: "JWT" })));
/**
 * Longest token any route accepts (longer is malformed, not work for the CPU). Signing refuses to
 * make a longer one, so no token is ever issued that every route would then refuse.
 */
export const MAX_TOKEN_LENGTH = 8192;

/** A token that would be longer than {@link MAX_TOKEN_LENGTH}: never issued. */
export class TokenTooLargeError extends Error {
  readonly length: number;
  constructor(length: number) {
    super(`the token would be ${length} characters, over the ${MAX_TOKEN_LENGTH}-character limit on tokens`);
    this.name = "TokenTooLargeError";
    this.length = length;
  }
}

export function base64UrlEncode(bytes: Uint8Array): string {
  let bin = "";
  for (const b of bytes) bin += String.fromCharCode(b);
  return btoa(bin).replace(/\+/g, "-").replace(/\//g, "_").replace(/=+$/, "");
}

export function base64UrlDecode(text: string): Uint8Array {
  if (!/^[A-Za-z0-9_-]*$/.test(text)) throw new TokenError("malformed", "token is not base64url");
  const pad = text.length % 4 === 0 ? "" : "=".repeat(4 - (text.length % 4));
  let bin: string;
  try {
    bin = atob(text.replace(/-/g, "+").replace(/_/g, "/") + pad);
  } catch {
    throw new TokenError("malformed", "token is not base64url");
  }
  const out = new Uint8Array(bin.length);
  for (let i = 0; i < bin.length; i++) out[i] = bin.charCodeAt(i);
  return out;
}

/**
 * Imported HMAC keys by secret. Values, not promises: a request never waits on another's import.
 * Secrets rotate rarely, so the cache is tiny: the current secret and the previous one or two.
 */
const MAX_CACHED_KEYS = 8;
const keyCache = new BoundedMap<string, CryptoKey>(MAX_CACHED_KEYS);

/**
 * The HMAC key for a secret, imported once per isolate. Two requests that miss at the same time each
 * import it (cheap, and it happens once per isolate and secret); sharing the pending import would make
 * one request continue in the other's context, which workerd refuses (see functions/waiting.ts).
 */
async function hmacKey(secret: string): Promise<CryptoKey> {
  const cached = keyCache.get(secret);
  if (cached) return cached;
  const key = await crypto.subtle.importKey("raw", encoder.encode(secret), { name: "HMAC", hash: "SHA-256" }, false, [
    "sign",
    "verify",
  ]);
  keyCache.set(secret, key);
  return key;
}

/** HS256 signature: 32 bytes, 43 base64url characters. */
const SIGNATURE_LENGTH = 43;

/**
 * Signs the claims as a compact HS256 JWT.
 * @throws TokenTooLargeError when the token would be longer than any route accepts.
 */
export async function signToken(claims: TokenClaims, secret: string): Promise<string> {
  const payload = base64UrlEncode(encoder.encode(JSON.stringify(claims)));
  const input = `${HEADER}.${payload}`;
  const length = input.length + 1 + SIGNATURE_LENGTH;
  if (length > MAX_TOKEN_LENGTH) throw new TokenTooLargeError(length);
  const sig = await crypto.subtle.sign("HMAC", await hmacKey(secret), encoder.encode(input));
  return `${input}.${base64UrlEncode(new Uint8Array(sig))}`;
}

/**
 * What any token that is not one of ours says, whichever part failed: a caller cannot act on which
 * base64url part did not decode, but can on where a good token comes from.
 */
export const MALFORMED =
  "malformed token: not a token Floodgate issued (header.claims.signature, base64url JSON); mint one with POST /v1/tokens (docs/api.md, Tokens)";

function parseJson(bytes: Uint8Array): unknown {
  try {
    return JSON.parse(decoder.decode(bytes));
  } catch {
    throw new TokenError("malformed", MALFORMED);
  }
}

const isObject = (v: unknown): v is Record<string, unknown> => typeof v === "object" && v !== null && !Array.isArray(v);

function checkClaims(v: unknown): { claims: TokenClaims; patterns: ChannelPattern[] } {
  const bad = (what: string) => new TokenError("malformed", `token claim ${what} is invalid`);
  if (!isObject(v)) throw bad("set");
  const { sub, typ, chs, scp, iat, exp, jti, rl, sid, sst, grp } = v;
  if (typeof sub !== "string" || sub.length === 0) throw bad("sub");
  if (typ !== "access" && typ !== "refresh") throw bad("typ");
  if (!Array.isArray(chs) || chs.some((c) => typeof c !== "string")) throw bad("chs");
  if (!Array.isArray(scp) || scp.some((s) => !SCOPES.includes(s as Scope))) throw bad("scp");
  if (typeof iat !== "number" || typeof exp !== "number" || !Number.isFinite(exp)) throw bad("exp");
  if (typeof jti !== "string" || jti.length === 0) throw bad("jti");
  if (rl !== undefined && !isObject(rl)) throw bad("rl");
  if (grp !== undefined && (typeof grp !== "string" || !GROUP_NAME.test(grp))) throw bad("grp");
  if (sid !== undefined && (typeof sid !== "string" || sid.length === 0)) throw bad("sid");
  if (sst !== undefined && (typeof sst !== "number" || !Number.isFinite(sst))) throw bad("sst");
  let patterns: ChannelPattern[];
  try {
    patterns = (chs as string[]).map((c) => parsePattern(c));
  } catch (e) {
    if (e instanceof GrammarError) throw bad("chs");
    throw e;
  }
  return { claims: v as unknown as TokenClaims, patterns };
}

/** Most tokens the verified-token cache holds. */
export const VERIFIED_CACHE_TOKENS = 10_000;
/**
 * Most bytes the verified-token cache holds: tokens carry up to {@link MAX_TOKEN_LENGTH} characters of
 * claims each, so a count alone would let 10,000 large ones hold hundreds of megabytes of an isolate.
 */
export const VERIFIED_CACHE_BYTES = 8 * 1024 * 1024;
/** What one cached token holds besides its text and claims: the key, the objects' own overhead. */
const VERIFIED_ENTRY_OVERHEAD = 512;

interface VerifiedEntry {
  secret: string;
  /** The token's whole text: a hit must be this very token, not another with the same signature part. */
  token: string;
  result: VerifiedToken;
  /**
   * Estimated bytes: the token's text (base64url, one byte a character) and its claims as parsed
   * (strings at 2 bytes a character, the patterns beside them).
   */
  bytes: number;
}

/**
 * Tokens whose signature and shape this isolate already verified, keyed by their signature part: the
 * HMAC-SHA-256 digest of the rest under the secret, 43 characters whatever the token's length, and
 * already in the token, so a lookup costs no hashing (a SHA-256 of each token was 6% of a publish's
 * CPU in a profile). A hit counts only if the whole text is the one verified (a token with a copied
 * signature and other claims misses, and then fails its own check); it skips the HMAC (the same string
 * verifies the same way with the same secret); expiry and type are checked again on every use.
 * Bounded in tokens and in bytes, and keyed by secret too so a rotated secret starts clean.
 */
export const verifiedTokens = new BoundedMap<string, VerifiedEntry>(VERIFIED_CACHE_TOKENS, {
  max: VERIFIED_CACHE_BYTES,
  of: (_key, entry) => entry.bytes,
});

/** The cache key of a token: its signature part (after the last dot; a malformed token's is whatever is there). */
function signaturePart(token: string): string {
  return token.slice(token.lastIndexOf(".") + 1);
}

/**
 * Verifies signature, shape, expiry (`now < exp`, no leeway), issue time (`iat` at most
 * {@link IAT_SKEW_SECONDS} ahead of now) and type.
 * @param nowSeconds epoch seconds
 * @throws TokenError
 */
export async function verifyToken(
  token: string,
  secret: string,
  expected: TokenType,
  nowSeconds: number,
): Promise<VerifiedToken> {
  if (typeof token !== "string" || token.length === 0 || token.length > MAX_TOKEN_LENGTH) {
    throw new TokenError("malformed", MALFORMED);
  }
  const key = signaturePart(token);
  const hit = verifiedTokens.get(key);
  const result =
    hit && hit.secret === secret && hit.token === token
      ? hit.result
      : await verifySignatureAndShape(token, secret, key);
  const { claims } = result;
  if (!(nowSeconds < claims.exp)) throw new TokenError("expired", "token has expired");
  if (claims.iat > nowSeconds + IAT_SKEW_SECONDS)
    throw new TokenError("not_yet_valid", `token was issued in the future (iat more than ${IAT_SKEW_SECONDS}s ahead)`);
  if (claims.typ !== expected)
    throw new TokenError("wrong_type", `expected ${expected === "access" ? "an" : "a"} ${expected} token`);
  return result;
}

async function verifySignatureAndShape(token: string, secret: string, key: string): Promise<VerifiedToken> {
  const parts = token.split(".");
  if (parts.length !== 3) throw new TokenError("malformed", MALFORMED);
  const [h, p, s] = parts as [string, string, string];
  const header = parseJson(base64UrlDecode(h));
  // Only HS256 is accepted: "none", RS256 and friends are refused before any key is used.
  if (!isObject(header) || header.alg !== "HS256") throw new TokenError("malformed", "token algorithm must be HS256");
  const sig = base64UrlDecode(s);
  const ok = await crypto.subtle.verify("HMAC", await hmacKey(secret), sig, encoder.encode(`${h}.${p}`));
  if (!ok) throw new TokenError("bad_signature", "token signature is invalid");
  const result = checkClaims(parseJson(base64UrlDecode(p)));
  // The token's text; the claims' JSON is 3/4 of the base64url part, parsed its strings take 2 bytes
  // a character, and the patterns parsed from `chs` about as much again.
  const bytes = token.length + 3 * p.length + VERIFIED_ENTRY_OVERHEAD;
  verifiedTokens.set(key, { secret, token, result, bytes });
  return result;
}
