/** A subscription's WebSocket connection: opening one (the token in a subprotocol) and reading its frames. */
import { TOKEN_EXPIRED_CLOSE } from "../../../src/wire/close-codes.js";
import { WS_BEARER_PREFIX, WS_PROTOCOL } from "../../../src/wire/subscribe-params.js";
import { FloodgateError } from "./errors.js";
import type { ConnectionEvents } from "./transport.js";

/** The part of a WebSocket the client uses (browser, Node 22 and workerd sockets all have it). */
export interface SocketLike {
  addEventListener(type: "message", fn: (ev: { data: unknown }) => void): void;
  addEventListener(type: "close" | "error", fn: (ev: { code?: number }) => void): void;
  close(code?: number, reason?: string): void;
}

/**
 * Opens one WebSocket connection of a subscription with `open` (`ClientOptions.openWebSocket`, else
 * the runtime's WebSocket) and tells `on` what becomes of it; `opened` and `failed` tell the fallback
 * (./transport.ts) whether it opened. The token goes in a subprotocol, never the URL.
 */
export async function connectWebSocket(
  open: ((url: string, protocols: string[]) => Promise<SocketLike>) | undefined,
  url: string,
  token: string | undefined,
  on: ConnectionEvents & { opened(): void; failed(error: unknown): void },
): Promise<void> {
  try {
    const ws = await (open ?? defaultOpenWebSocket)(
      url,
      token ? [WS_PROTOCOL, `${WS_BEARER_PREFIX}${token}`] : [WS_PROTOCOL],
    );
    on.opened();
    if (on.isClosed()) return ws.close(1000, "closed");
    on.hold(ws);
    on.live();
    let gone = false;
    const lost = (ev?: { code?: number }) => {
      if (gone) return;
      gone = true;
      if (ev?.code === TOKEN_EXPIRED_CLOSE) on.expired();
      else on.lost(new FloodgateError(0, "network", "WebSocket closed"));
    };
    ws.addEventListener("message", (ev) => {
      if (typeof ev.data !== "string") return;
      on.frame(ev.data);
      // The `expired` frame is the server's last (token expired, session revoked): renew now rather
      // than wait for its 4001 close, which over some networks never completes the handshake.
      if (EXPIRED_FRAME.test(ev.data)) {
        lost({ code: TOKEN_EXPIRED_CLOSE });
        ws.close(1000, "expired");
      }
    });
    ws.addEventListener("close", lost);
    ws.addEventListener("error", lost);
  } catch (e) {
    on.failed(e);
  }
}

/** A text frame that is (or, packed, ends with) the `expired` frame. */
const EXPIRED_FRAME = /"type":"expired"[^{}]*\}\]?$/;

interface OpeningSocket extends SocketLike {
  addEventListener(
    type: "open" | "message" | "close" | "error",
    fn: (ev: { data: unknown } & { code?: number }) => void,
  ): void;
}

function defaultOpenWebSocket(url: string, protocols: string[]): Promise<SocketLike> {
  const WS = (globalThis as unknown as { WebSocket?: new (url: string, protocols: string[]) => OpeningSocket })
    .WebSocket;
  if (!WS) return Promise.reject(new Error("no WebSocket in this runtime"));
  return new Promise((resolve, reject) => {
    const ws = new WS(url, protocols);
    ws.addEventListener("error", () => reject(new Error("WebSocket failed to open")));
    ws.addEventListener("open", () => resolve(ws));
  });
}
