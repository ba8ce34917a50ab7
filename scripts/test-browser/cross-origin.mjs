// A web app on another origin (docs/api.md, "Browsers on other origins"): a page served from a second
// local origin, listed in CORS_ORIGINS, uses the TypeScript client (publish, a WebSocket subscribe,
// the SSE fallback), reads history and presence; a page on an origin not in the list is refused
// (fetch blocked by the browser, WebSocket upgrade 403). The Worker runs in a workerd of its own
// (scripts/lib/workerd.mjs), straight to the Worker, as the edge would serve it; the pages come from
// small local HTTP servers, the client from packages/client/dist (built by `npm install`).
import { readFileSync, statSync } from "node:fs";
import { createServer } from "node:http";
import { extname, join, normalize } from "node:path";
import { root } from "../lib/root.mjs";
import { mintToken } from "../lib/tokens.mjs";
import { startFloodgate } from "../lib/workerd.mjs";
import { check } from "./setup.mjs";

const PAGE_PORT = Number(process.env.BROWSER_TEST_PAGE_PORT ?? 8798);
const OTHER_PORT = PAGE_PORT + 1;
const TYPES = { ".html": "text/html", ".js": "text/javascript", ".json": "application/json" };
const CLIENT_DIST = join(root, "packages", "client", "dist");

/** A page server on `port`: `/` is the app's page, `/client/…` the client package's dist. */
function pageServer(port) {
  const server = createServer((req, res) => {
    const url = new URL(req.url ?? "/", `http://127.0.0.1:${port}`);
    if (url.pathname === "/") {
      res.writeHead(200, { "content-type": "text/html" });
      res.end(
        '<!doctype html><script type="importmap">{"imports":{"@floodgate/client":"/client/index.js"}}</script><p>app</p>',
      );
      return;
    }
    const rel = normalize(url.pathname.replace(/^\/client\//, "")).replace(/^(\.\.[/\\])+/, "");
    const file = join(CLIENT_DIST, rel);
    if (
      !url.pathname.startsWith("/client/") ||
      !file.startsWith(CLIENT_DIST) ||
      !statSync(file, { throwIfNoEntry: false })?.isFile()
    ) {
      res.writeHead(404).end();
      return;
    }
    res.writeHead(200, { "content-type": TYPES[extname(file)] ?? "application/octet-stream" });
    res.end(readFileSync(file));
  });
  return new Promise((resolve) => server.listen(port, "127.0.0.1", () => resolve(server)));
}

/** What the app page does with the client, in the browser; answers what each step saw. */
async function appSteps({ base, token, channel }) {
  const { FloodgateClient } = await import("@floodgate/client");
  const out = {};
  const fg = new FloodgateClient({ baseUrl: base, accessToken: token });
  const first = await fg.publish(channel, { n: 1 });
  out.published = first.status;
  const history = await fetch(`${base}/v1/history/${channel}`, { headers: { authorization: `Bearer ${token}` } });
  out.history = history.ok ? (await history.json()).messages.length : `HTTP ${history.status}`;
  out.rateLimitHeader = history.headers.get("ratelimit") !== null;
  out.presence = (await fg.presence(channel)).occupancy;
  const receive = (client, transport) =>
    new Promise((resolve, reject) => {
      const timer = setTimeout(() => reject(new Error(`${transport}: nothing received`)), 15_000);
      const sub = client.subscribe(
        channel,
        (m) => {
          clearTimeout(timer);
          sub.close();
          resolve({ seq: m.seq, transport: sub.transport });
        },
        { after: 0, transport },
      );
    });
  out.websocket = await receive(fg, "websocket");
  // The SSE fallback: the client told that WebSockets cannot be opened here.
  const noSockets = new FloodgateClient({
    baseUrl: base,
    accessToken: token,
    openWebSocket: () => Promise.reject(new Error("no WebSockets here")),
  });
  out.sse = await receive(noSockets, "auto");
  return out;
}

/** What a page on an unlisted origin gets: its publish blocked, its WebSocket refused. */
async function otherSteps({ base, token, channel }) {
  const out = {};
  try {
    await fetch(`${base}/v1/publish/${channel}`, {
      method: "POST",
      headers: { authorization: `Bearer ${token}`, "content-type": "application/json" },
      body: "{}",
    });
    out.fetch = "allowed";
  } catch {
    out.fetch = "blocked";
  }
  out.socket = await new Promise((resolve) => {
    const ws = new WebSocket(`${base.replace(/^http/, "ws")}/v1/subscribe/${channel}`);
    ws.onopen = () => {
      ws.close();
      resolve("opened");
    };
    ws.onerror = () => resolve("refused");
  });
  return out;
}

/** The page on a listed origin works; a page on another origin is refused. */
export async function checkCrossOrigin(browser) {
  const pageOrigin = `http://127.0.0.1:${PAGE_PORT}`;
  const worker = await startFloodgate({ CORS_ORIGINS: pageOrigin });
  const servers = [await pageServer(PAGE_PORT), await pageServer(OTHER_PORT)];
  const channel = "public:live.crossorigin";
  try {
    const token = await mintToken(worker, { sub: "browser-app", channels: ["public:live.*"] });
    const args = { base: worker.base, token, channel };
    const app = await browser.newPage();
    await app.goto(`${pageOrigin}/`);
    const seen = await app.evaluate(appSteps, args);
    check(
      seen.published === "delivered" && seen.history >= 1 && seen.rateLimitHeader && typeof seen.presence === "number",
      `a page on a listed origin publishes and reads history and presence with the client (${JSON.stringify(seen)})`,
    );
    check(
      seen.websocket.seq >= 1 && seen.websocket.transport === "websocket",
      "a page on a listed origin subscribes over WebSocket",
    );
    check(
      seen.sse.seq >= 1 && seen.sse.transport === "sse",
      `a page on a listed origin falls back to SSE when WebSockets fail, and receives (${JSON.stringify(seen.sse)})`,
    );
    const other = await browser.newPage();
    await other.goto(`http://127.0.0.1:${OTHER_PORT}/`);
    const refused = await other.evaluate(otherSteps, args);
    check(
      refused.fetch === "blocked" && refused.socket === "refused",
      `a page on an origin not in CORS_ORIGINS is refused (${JSON.stringify(refused)})`,
    );
    await app.close();
    await other.close();
  } finally {
    for (const s of servers) s.close();
    await worker.stop();
  }
}
