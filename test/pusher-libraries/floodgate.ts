/**
 * What the library tests share: the Floodgate of this run (./global-setup.ts), the `pusher` server
 * library and pusher-js clients configured for it as an app moving from Pusher configures them (host,
 * port, keys), admin calls, and waiting.
 */
import Pusher from "pusher";
import PusherJS from "pusher-js";
import { inject } from "vitest";
// @ts-expect-error: a script module of the repository, plain JavaScript
import { mintToken } from "../../scripts/lib/tokens.mjs";
import { PUSHER } from "./global-setup";

export { PUSHER };

export const floodgate = inject("floodgate");
const url = new URL(floodgate.base);
export const HOST = url.hostname;
export const PORT = Number(url.port);

/**
 * The `pusher` server library, pointed at Floodgate: host, port, no TLS; `encryptionMasterKeyBase64`
 * as an app with end-to-end encrypted channels sets it (its `authorizeChannel` then adds their key).
 */
export function server(over: { secret?: string; encryptionMasterKeyBase64?: string } = {}): Pusher {
  return new Pusher({
    appId: PUSHER.appId,
    key: PUSHER.key,
    secret: over.secret ?? PUSHER.secret,
    host: HOST,
    port: String(PORT),
    useTLS: false,
    ...(over.encryptionMasterKeyBase64 ? { encryptionMasterKeyBase64: over.encryptionMasterKeyBase64 } : {}),
  });
}

/** A pusher-js client, as an app configures it for a server of its own (wsHost, wsPort, forceTLS off). */
export function client(options: Partial<ConstructorParameters<typeof PusherJS>[1]> = {}): PusherJS {
  return new PusherJS(PUSHER.key, {
    cluster: "local",
    wsHost: HOST,
    wsPort: PORT,
    forceTLS: false,
    enabledTransports: ["ws"],
    disableStats: true,
    ...options,
  });
}

/** pusher-js's `channelAuthorization` answered by the app's own backend: the `pusher` library's `authorizeChannel`. */
export function backendAuthorization(
  member?: (channel: string) => { user_id?: string; user_info?: unknown },
  backend: Pusher = server(),
) {
  return {
    endpoint: "unused",
    transport: "ajax" as const,
    customHandler: (
      params: { socketId: string; channelName: string },
      callback: (error: Error | null, data: { auth: string; channel_data?: string } | null) => void,
    ) => {
      const data = params.channelName.startsWith("presence-") ? member?.(params.channelName) : undefined;
      callback(null, backend.authorizeChannel(params.socketId, params.channelName, data as never));
    },
  };
}

/** Resolves when pusher-js says the channel is subscribed, rejects on its subscription error. */
export function subscribed(c: PusherJS, name: string) {
  return new Promise<ReturnType<PusherJS["subscribe"]>>((resolve, reject) => {
    const channel = c.subscribe(name);
    channel.bind("pusher:subscription_succeeded", () => resolve(channel));
    channel.bind("pusher:subscription_error", (e: unknown) =>
      reject(Object.assign(new Error("subscription_error"), { detail: e })),
    );
  });
}

/** Waits for `ready`, checking every few ms, at most `ms`. */
export async function until(ready: () => boolean | Promise<boolean>, what: string, ms = 15_000): Promise<void> {
  const end = Date.now() + ms;
  while (!(await ready())) {
    if (Date.now() > end) throw new Error(`timed out waiting for ${what}`);
    await new Promise((r) => setTimeout(r, 10));
  }
}

/** An admin call to the Floodgate of this run. */
export function admin(path: string, init: RequestInit = {}): Promise<Response> {
  return fetch(`${floodgate.base}${path}`, {
    ...init,
    headers: {
      authorization: `Bearer ${floodgate.admin}`,
      "content-type": "application/json",
      ...(init.headers ?? {}),
    },
  });
}

/** A Floodgate access token (through the admin API). */
export function token(sub: string, channels: string[], scopes = ["subscribe"]): Promise<string> {
  return mintToken({ ...floodgate, spreadMintAddresses: true }, { sub, channels, scopes });
}

let n = 0;
/** A channel name of its own for each test. */
export function uniq(prefix = "c"): string {
  n++;
  return `${prefix}${process.pid}x${Date.now().toString(36)}x${n}`;
}
