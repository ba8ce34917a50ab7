/**
 * Tokens signed here (not minted through the API) and raw requests with a chosen client IP, for the
 * tests of the HTTP bounds: the read budget, verified subjects' budgets, sessions, tokens in headers and
 * security headers.
 */
import { signToken } from "../../src/worker/auth/tokens";
import { callAndWait, uniq } from "./helpers";

/** TOKEN_SECRET of the test configuration (test/vitest.config.ts). */
export const SECRET = "test-token-secret-0123456789abcdef";

/** A token's claims, read without verifying it. */
export const decode = (t: string) =>
  JSON.parse(atob((t.split(".")[1] as string).replace(/-/g, "+").replace(/_/g, "/"))) as Record<string, unknown>;

/** An access token for `sub`, signed as the Worker signs them (valid five minutes). */
export async function accessToken(sub: string, chs = ["public:bound.*", "private:bound.x.*"]) {
  const now = Math.floor(Date.now() / 1000);
  return signToken(
    { sub, typ: "access", chs, scp: ["publish", "subscribe"], iat: now, exp: now + 300, jti: uniq() },
    SECRET,
  );
}

/** `GET /v1/history/<ch>` from client IP `ip` (none: no CF-Connecting-IP), with `token` if given. */
export const history = (e: Env, ch: string, ip: string | null, token?: string) =>
  callAndWait(
    `/v1/history/${ch}`,
    {
      headers: {
        ...(ip ? { "cf-connecting-ip": ip } : {}),
        ...(token ? { authorization: `Bearer ${token}` } : {}),
      },
    },
    e,
  );

/** An SSE subscribe with `headers`. */
export const sse = (e: Env, ch: string, headers: Record<string, string>) =>
  callAndWait(`/v1/subscribe/${ch}`, { headers: { accept: "text/event-stream", ...headers } }, e);

/** A WebSocket subscribe with `headers`. */
export const ws = (e: Env, ch: string, headers: Record<string, string>) =>
  callAndWait(`/v1/subscribe/${ch}`, { headers: { upgrade: "websocket", ...headers } }, e);

/** Ends a subscription answer, whichever kind it is. */
export function closeQuietly(res: Response): void {
  if (res.webSocket) {
    res.webSocket.accept();
    res.webSocket.close();
  } else void res.body?.cancel();
}
