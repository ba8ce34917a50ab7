/**
 * Request helpers shared by the routes: channel parameters, bearer tokens, bounded body reading,
 * token checks and the admin bearer. Each failure is an ApiError in the contract's shape.
 */
import { type ChannelName, GrammarError, matchesPattern, parseChannelName } from "./channels";
import { ApiError, invalidArgument, permissionDenied, unauthenticated } from "./errors";
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

/** The token secret, or a 500 when it is not configured (token routes fail closed). */
export function tokenSecret(env: Env): string {
  const s = (env as { TOKEN_SECRET?: string }).TOKEN_SECRET;
  if (typeof s !== "string" || s.length === 0) {
    console.error("floodgate: TOKEN_SECRET is not set; token routes fail closed");
    throw new ApiError("internal", "server is not configured: TOKEN_SECRET is not set", { variable: "TOKEN_SECRET" });
  }
  return s;
}

/** Verifies an access token and checks scope and channel. @throws ApiError 401 / 403 */
export async function authorise(
  env: Env,
  token: string | null,
  scope: Scope,
  channel: ChannelName,
): Promise<VerifiedToken> {
  const secret = tokenSecret(env);
  if (!token) throw unauthenticated("missing bearer token");
  let verified: VerifiedToken;
  try {
    verified = await verifyToken(token, secret, "access", Math.floor(Date.now() / 1000));
  } catch (e) {
    if (e instanceof TokenError) throw unauthenticated(e.message);
    throw e;
  }
  if (!verified.claims.scp.includes(scope)) throw permissionDenied(`token lacks the "${scope}" scope`);
  if (!verified.patterns.some((p) => matchesPattern(p, channel))) {
    throw permissionDenied(`token does not grant channel ${channel.name}`);
  }
  return verified;
}

const encoder = new TextEncoder();

/** Constant-time check of the admin bearer. @throws ApiError 401, or 500 when ADMIN_TOKEN is unset. */
export async function requireAdmin(env: Env, request: Request): Promise<void> {
  const expected = (env as { ADMIN_TOKEN?: string }).ADMIN_TOKEN;
  if (typeof expected !== "string" || expected.length === 0) {
    console.error("floodgate: ADMIN_TOKEN is not set; admin routes fail closed");
    throw new ApiError("internal", "server is not configured: ADMIN_TOKEN is not set", { variable: "ADMIN_TOKEN" });
  }
  const given = bearer(request);
  if (!given) throw unauthenticated("admin bearer token required");
  // Hash both so the comparison has equal lengths and takes the same time whatever was sent.
  const [a, b] = await Promise.all([
    crypto.subtle.digest("SHA-256", encoder.encode(given)),
    crypto.subtle.digest("SHA-256", encoder.encode(expected)),
  ]);
  if (!crypto.subtle.timingSafeEqual(a, b)) throw unauthenticated("admin bearer token required");
}

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
