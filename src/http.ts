/**
 * Request helpers shared by the routes: channel parameters, bearer tokens, bounded body reading,
 * token checks and the admin bearer middleware. Each failure is an ApiError in the contract's shape.
 */
import { bearerAuth } from "hono/bearer-auth";
import { createMiddleware } from "hono/factory";
import type { AppEnv } from "./app-env";
import { anyPatternMatches, type ChannelName, GrammarError, parseChannelName } from "./channels";
import { DurationError, parseDuration } from "./durations";
import { ApiError, invalidArgument, permissionDenied, unauthenticated } from "./errors";
import { type SecretName, secretProblem } from "./secrets";
import { type Scope, TokenError, type VerifiedToken, verifyToken } from "./tokens";

/** Parses a channel path parameter. @throws ApiError 400 */
export function channelParam(raw: string | undefined): ChannelName {
  try {
    return parseChannelName(raw ?? "");
  } catch (e) {
    if (e instanceof GrammarError) throw invalidArgument(e.message);
    throw e;
  }
}

/**
 * `source_channel`, the filter of the analytics channel's history and export: a channel name, and
 * only on the analytics channel (`on`), where the copies are — elsewhere it could only ever match
 * nothing, so it is refused rather than silently answered empty. Null when absent. @throws ApiError 400
 */
export function sourceChannelParam(
  raw: string | undefined,
  on: ChannelName,
  config: { analyticsChannel: ChannelName },
): ChannelName | null {
  if (raw === undefined) return null;
  if (on.name !== config.analyticsChannel.name) {
    throw invalidArgument(`source_channel applies only to the analytics channel ${config.analyticsChannel.name}`);
  }
  try {
    return parseChannelName(raw);
  } catch (e) {
    if (e instanceof GrammarError) throw invalidArgument(`source_channel: ${e.message}`);
    throw e;
  }
}

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

/** Verifies an access token: signature, shape, expiry and type. @throws ApiError 401 */
export async function verifyAccess(env: Env, token: string | null): Promise<VerifiedToken> {
  const secret = tokenSecret(env);
  if (!token) throw unauthenticated("missing bearer token");
  try {
    return await verifyToken(token, secret, "access", Math.floor(Date.now() / 1000));
  } catch (e) {
    if (e instanceof TokenError) throw unauthenticated(e.message);
    throw e;
  }
}

/** Checks that a verified token grants `scope` on `channel`. @throws ApiError 403 */
export function checkGrant(verified: VerifiedToken, scope: Scope, channel: ChannelName): void {
  if (!verified.claims.scp.includes(scope)) throw permissionDenied(`token lacks the "${scope}" scope`);
  if (!anyPatternMatches(verified.patterns, channel)) {
    throw permissionDenied(`token does not grant channel ${channel.name}`);
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
  checkGrant(verified, scope, channel);
  return verified;
}

/** Every admin refusal, whatever was wrong with the header: the contract's 401. */
const adminRefused = () => unauthenticated("admin bearer token required").toResponse();

/**
 * The admin bearer (docs/api.md, Operator routes): Hono's `bearerAuth`, which compares in constant
 * time, answering the contract's 401 for a missing, malformed or wrong token. Fails closed first:
 * with `ADMIN_TOKEN` unset or weak every admin route answers 500 naming it, whatever was sent.
 */
export const adminAuth = createMiddleware<AppEnv>(async (c, next) => {
  const token = requiredSecret(c.env, "ADMIN_TOKEN");
  const check = bearerAuth<AppEnv>({
    token,
    noAuthenticationHeader: { message: adminRefused },
    invalidAuthenticationHeader: { message: adminRefused },
    invalidToken: { message: adminRefused },
  });
  return check(c, next);
});

/**
 * Reads a body of at most `max` bytes, counting as it streams (a missing or lying Content-Length
 * cannot get more through). @throws ApiError 413
 */
export async function readBody(request: Request, max: number): Promise<Uint8Array> {
  const declared = request.headers.get("content-length");
  if (declared !== null && Number(declared) > max) throw tooLarge(max);
  if (!request.body) return new Uint8Array(0);
  // With a declared length the runtime delivers exactly that many bytes (HTTP framing), so one
  // buffered read is safe and costs far less CPU than pulling chunks through a reader.
  if (declared !== null && /^\d+$/.test(declared)) return new Uint8Array(await request.arrayBuffer());
  const reader = request.body.getReader();
  const chunks: Uint8Array[] = [];
  let total = 0;
  for (;;) {
    const { done, value } = await reader.read();
    if (done) break;
    total += value.byteLength;
    if (total > max) {
      await reader.cancel().catch(() => {});
      throw tooLarge(max);
    }
    chunks.push(value);
  }
  const out = new Uint8Array(total);
  let off = 0;
  for (const c of chunks) {
    out.set(c, off);
    off += c.byteLength;
  }
  return out;
}

function tooLarge(max: number): ApiError {
  return new ApiError("payload_too_large", `body is larger than ${max} bytes`);
}

const utf8 = new TextDecoder("utf-8", { fatal: true, ignoreBOM: false });

/** Decodes UTF-8 JSON. @throws ApiError 400 for invalid UTF-8, empty bodies or invalid JSON. */
export function parseJsonBody(bytes: Uint8Array): unknown {
  return parseJsonText(bytes).value;
}

/**
 * Decodes UTF-8 JSON and also returns it as one line of text, exactly as sent otherwise: numbers keep
 * every digit (JSON.parse would round 2^53+1), and a raw CR or LF can only be whitespace in valid JSON,
 * so replacing it keeps the value while making it fit one SSE `data:` line.
 */
export function parseJsonText(bytes: Uint8Array): { value: unknown; text: string } {
  let text: string;
  try {
    text = utf8.decode(bytes);
  } catch {
    throw invalidArgument("body is not valid UTF-8");
  }
  if (text.trim().length === 0) throw invalidArgument("body must be a JSON value");
  let value: unknown;
  try {
    value = JSON.parse(text);
  } catch {
    throw invalidArgument("body is not valid JSON");
  }
  return { value, text: text.replace(/[\r\n]/g, " ").trim() };
}

/** Reads and parses a JSON body of at most `max` bytes. */
export async function readJson(request: Request, max: number): Promise<unknown> {
  return parseJsonBody(await readBody(request, max));
}

/** A non-negative integer query parameter, or null when absent. @throws ApiError 400 */
export function intParam(value: string | undefined | null, name: string, max = Number.MAX_SAFE_INTEGER): number | null {
  if (value === undefined || value === null) return null;
  if (!/^\d{1,16}$/.test(value) || Number(value) > max) {
    throw invalidArgument(`${name} must be a whole number between 0 and ${max}`);
  }
  return Number(value);
}

/** A `within` query parameter (a duration, default 10m) in milliseconds. @throws ApiError 400 */
export function withinParam(value: string | undefined): number {
  try {
    return parseDuration(value ?? "10m");
  } catch (e) {
    if (e instanceof DurationError) throw invalidArgument('within must be a duration such as "10m"');
    throw e;
  }
}

/**
 * The client a per-IP budget is charged to, from `CF-Connecting-IP` (one address, set by Cloudflare;
 * never `X-Forwarded-For`, which clients can write to), or null when the header is absent. An
 * IPv4-mapped IPv6 address counts as its IPv4 address, and any other IPv6 address as its /64: one
 * subscriber usually holds a whole /64, so keying on full addresses would give it 2^64 budgets.
 */
export function clientIp(request: Request): string | null {
  const raw = request.headers.get("cf-connecting-ip")?.trim() ?? "";
  if (raw.length === 0) return null;
  if (!raw.includes(":")) return raw;
  const mapped = /^::ffff:(\d{1,3}(?:\.\d{1,3}){3})$/i.exec(raw);
  if (mapped) return mapped[1] as string;
  const prefix = ipv6Prefix64(raw);
  return prefix ?? raw;
}

/** The first four groups of an IPv6 address as `a:b:c:d::/64`, or null when it does not parse. */
function ipv6Prefix64(ip: string): string | null {
  const halves = ip.toLowerCase().split("::");
  if (halves.length > 2) return null;
  const groups = (h: string | undefined) => (h ? h.split(":") : []);
  const head = groups(halves[0]);
  const tail = groups(halves[1]);
  const missing = 8 - head.length - tail.length;
  if (halves.length === 1 ? missing !== 0 : missing < 1) return null;
  const all = [...head, ...Array<string>(halves.length === 2 ? missing : 0).fill("0"), ...tail];
  if (!all.every((g) => /^[0-9a-f]{1,4}$/.test(g))) return null;
  return `${all
    .slice(0, 4)
    .map((g) => g.replace(/^0+(?=.)/, ""))
    .join(":")}::/64`;
}
