/**
 * The Pusher signatures (docs/api.md, "The Pusher door"): a channel authorization
 * (`<key>:<hex HMAC-SHA256 of "<socket_id>:<channel>[:<channel_data>]">`), as every Pusher server
 * library's `authorizeChannel` makes it, and the HTTP API's request signature (`auth_key`,
 * `auth_timestamp`, `auth_version`, `body_md5`, `auth_signature` over
 * `"<METHOD>\n<path>\n<the other query parameters sorted, lowercase keys>"`). WebCrypto only.
 */

const encoder = new TextEncoder();
/** HMAC keys by secret, imported once per isolate (a secret changes only with a new deployment). */
const keys = new Map<string, Promise<CryptoKey>>();

function hmacKey(secret: string): Promise<CryptoKey> {
  let key = keys.get(secret);
  if (!key) {
    key = crypto.subtle.importKey("raw", encoder.encode(secret), { name: "HMAC", hash: "SHA-256" }, false, ["sign"]);
    if (keys.size > 4) keys.clear();
    keys.set(secret, key);
  }
  return key;
}

function hex(buffer: ArrayBuffer): string {
  let out = "";
  for (const b of new Uint8Array(buffer)) out += b.toString(16).padStart(2, "0");
  return out;
}

/** Hex HMAC-SHA256 of `text` with `secret`. */
export async function hmacHex(secret: string, text: string): Promise<string> {
  return hex(await crypto.subtle.sign("HMAC", await hmacKey(secret), encoder.encode(text)));
}

/** Compares two strings in time that depends only on their lengths. */
export function sameText(a: string, b: string): boolean {
  if (a.length !== b.length) return false;
  let diff = 0;
  for (let i = 0; i < a.length; i++) diff |= a.charCodeAt(i) ^ b.charCodeAt(i);
  return diff === 0;
}

/** The string a channel authorization signs. */
export function channelAuthText(socketId: string, channel: string, channelData: string | null): string {
  return channelData === null ? `${socketId}:${channel}` : `${socketId}:${channel}:${channelData}`;
}

/** The `auth` a subscription to `channel` needs: `<key>:<signature>`. */
export async function channelAuth(
  app: { key: string; secret: string },
  socketId: string,
  channel: string,
  channelData: string | null,
): Promise<string> {
  return `${app.key}:${await hmacHex(app.secret, channelAuthText(socketId, channel, channelData))}`;
}

/** Whether `auth` authorizes `socketId` on `channel` (with `channelData` on a presence channel). */
export async function channelAuthValid(
  app: { key: string; secret: string },
  socketId: string,
  channel: string,
  channelData: string | null,
  auth: string | null,
): Promise<boolean> {
  if (auth === null) return false;
  return sameText(auth, await channelAuth(app, socketId, channel, channelData));
}

/** How far `auth_timestamp` may be from now, in seconds. */
export const HTTP_API_TIMESTAMP_WINDOW_S = 600;

/** The HTTP API's signed query parameters, none of which is an ordinary parameter. */
const RESERVED = new Set(["auth_key", "auth_timestamp", "auth_version", "body_md5", "auth_signature"]);

/** Why a signed HTTP API request is refused (each answers 401), or null when it is signed right. */
export async function httpApiProblem(
  app: { key: string; secret: string },
  method: string,
  path: string,
  query: Iterable<[string, string]>,
  body: string,
  nowS: number,
): Promise<string | null> {
  const params = new Map<string, string>();
  for (const [k, v] of query) {
    const key = k.toLowerCase();
    if (params.has(key)) return `query parameter ${key} is repeated`;
    params.set(key, v);
  }
  if (params.get("auth_key") !== app.key) return "auth_key is not this app's key";
  const ts = params.get("auth_timestamp") ?? "";
  if (!/^\d{1,12}$/.test(ts)) return "auth_timestamp is missing or not a number";
  if (Math.abs(nowS - Number(ts)) > HTTP_API_TIMESTAMP_WINDOW_S) {
    return `auth_timestamp is more than ${HTTP_API_TIMESTAMP_WINDOW_S} s from the server's time`;
  }
  if (params.get("auth_version") !== "1.0") return "auth_version must be 1.0";
  if (body.length > 0 && params.get("body_md5") !== (await md5Hex(body))) return "body_md5 does not match the body";
  const signature = params.get("auth_signature");
  if (signature === undefined) return "auth_signature is missing";
  params.delete("auth_signature");
  const sorted = [...params].sort(([a], [b]) => (a < b ? -1 : a > b ? 1 : 0));
  const text = `${method.toUpperCase()}\n${path}\n${sorted.map(([k, v]) => `${k}=${v}`).join("&")}`;
  if (!sameText(signature, await hmacHex(app.secret, text))) return "auth_signature does not match";
  return null;
}

/** The query parameters of a request other than the signature's own. */
export function ordinaryParams(query: Iterable<[string, string]>): Map<string, string> {
  const out = new Map<string, string>();
  for (const [k, v] of query) if (!RESERVED.has(k.toLowerCase())) out.set(k, v);
  return out;
}

/** Hex MD5 of `text` (the HTTP API's `body_md5`; workerd's WebCrypto digests MD5). */
async function md5Hex(text: string): Promise<string> {
  return hex(await crypto.subtle.digest("MD5", encoder.encode(text)));
}
