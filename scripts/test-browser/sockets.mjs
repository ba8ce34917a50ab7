// A browser's WebSocket subscriber, straight to the Worker in a workerd of its own (wrangler dev's
// proxy answers a browser's upgrade itself): frames uncompressed, and the token as a subprotocol.

import { check } from "../lib/checks.mjs";
import { mintToken } from "../lib/tokens.mjs";
import { startFloodgate } from "../lib/workerd.mjs";

/**
 * A browser offers permessage-deflate on every WebSocket; the Worker declines it (wrangler.toml
 * `no_web_socket_compression`) so a fan-out never compresses each frame once per subscriber. wrangler
 * dev's proxy answers the browser's upgrade itself, so this check talks to the Worker straight through
 * a workerd direct socket (scripts/lib/workerd.mjs), as the edge would.
 */
export async function checkUncompressedFrames(browser) {
  const worker = await startFloodgate({});
  // A page of no origin: the dashboard's CSP (rightly) allows it no socket to another origin.
  const page = await browser.newPage();
  try {
    const channel = "public:live.socket";
    await page.evaluate(
      (url) =>
        new Promise((resolve, reject) => {
          const ws = new WebSocket(url);
          window.__frame = new Promise((got) => {
            ws.onmessage = (e) => got({ extensions: ws.extensions, type: JSON.parse(e.data).type });
          });
          ws.onopen = resolve;
          ws.onerror = () => reject(new Error("subscribe socket failed"));
        }),
      `${worker.base.replace(/^http/, "ws")}/v1/subscribe/${channel}`,
    );
    const token = await mintToken(worker, { sub: "browser-socket", channels: ["public:live.*"] });
    const res = await fetch(`${worker.base}/v1/publish/${channel}`, {
      method: "POST",
      headers: { authorization: `Bearer ${token}`, "content-type": "application/json" },
      body: JSON.stringify({ hello: 1 }),
    });
    const frame = await page.evaluate(() => window.__frame);
    check(
      res.status === 200 && frame.type === "message" && frame.extensions === "",
      `a browser's WebSocket subscriber gets its frames uncompressed (extensions ${JSON.stringify(frame.extensions)})`,
    );

    // A private channel, the token offered as a subprotocol instead of in the URL.
    const privateChannel = "private:live.socket.secret";
    const privateToken = await mintToken(worker, { sub: "browser-private", channels: ["private:live.socket.*"] });
    const protocol = await page.evaluate(
      ({ url, token }) =>
        new Promise((resolve, reject) => {
          const ws = new WebSocket(url, ["floodgate", `bearer.${token}`]);
          window.__privateFrame = new Promise((got) => {
            ws.onmessage = (e) => got(JSON.parse(e.data).data);
          });
          ws.onopen = () => resolve(ws.protocol);
          ws.onerror = () => reject(new Error("private subscribe socket failed"));
        }),
      { url: `${worker.base.replace(/^http/, "ws")}/v1/subscribe/${privateChannel}`, token: privateToken },
    );
    await fetch(`${worker.base}/v1/publish/${privateChannel}`, {
      method: "POST",
      headers: { authorization: `Bearer ${privateToken}`, "content-type": "application/json" },
      body: JSON.stringify({ secret: 1 }),
    });
    const privateFrame = await page.evaluate(() => window.__privateFrame);
    check(
      protocol === "floodgate" && privateFrame?.secret === 1,
      `a browser WebSocket sends its token as the bearer.<token> subprotocol and gets "floodgate" back (got ${JSON.stringify(protocol)})`,
    );
  } finally {
    await page.close();
    await worker.stop();
  }
}
