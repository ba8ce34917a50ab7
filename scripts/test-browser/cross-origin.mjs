// A web app on another origin (docs/api.md, "Browsers on other origins"): a page served from a second
// local origin, listed in CORS_ORIGINS, uses the TypeScript client (publish, a WebSocket subscribe,
// the SSE fallback), reads history and presence, and connects pusher-js to the Pusher door (a public
// channel, and a private one authorized by POST /v1/pusher/auth with a Floodgate token, as an app with
// no backend does); a page on an origin not in the list is refused (fetch blocked by the browser,
// WebSocket upgrades 403, pusher-js never connects). The Worker runs in a workerd of its own
// (scripts/lib/workerd.mjs), straight to the Worker, as the edge would serve it; the pages come from
// small local HTTP servers, the client from packages/client/dist (built by `npm install`).
import { readFileSync, statSync } from "node:fs";
import { createServer } from "node:http";
import { createRequire } from "node:module";
import { extname, join, normalize } from "node:path";
import { check } from "../lib/checks.mjs";
import { root } from "../lib/root.mjs";
import { mintToken } from "../lib/tokens.mjs";
import { startFloodgate } from "../lib/workerd.mjs";

const PAGE_PORT = Number(process.env.BROWSER_TEST_PAGE_PORT ?? 8798);
const OTHER_PORT = PAGE_PORT + 1;
const TYPES = { ".html": "text/html", ".js": "text/javascript", ".json": "application/json" };
const CLIENT_DIST = join(root, "packages", "client", "dist");
const PUSHER_JS = join(root, "node_modules", "pusher-js", "dist", "web", "pusher.min.js");
const PusherServer = createRequire(import.meta.url)("pusher");
const APP = { appId: "xorigin-app", key: "xorigin-key", secret: "xorigin-pusher-secret-0" };

/** A page server on `port`: `/` is the app's page, `/client/…` the client package's dist. */
function pageServer(port) {
  const server = createServer((req, res) => {
    const url = new URL(req.url ?? "/", `http://127.0.0.1:${port}`);
    if (url.pathname === "/pusher.min.js") {
      res.writeHead(200, { "content-type": "text/javascript" });
      res.end(readFileSync(PUSHER_JS));
      return;
    }
    if (url.pathname === "/") {
      res.writeHead(200, { "content-type": "text/html" });
      res.end(
        '<!doctype html><script type="importmap">{"imports":{"@floodgate/client":"/client/index.js"}}</script><script src="/pusher.min.js"></script><p>app</p>',
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

/**
 * pusher-js on the page: one connection to a public and a private channel, the private one authorized
 * by POST /v1/pusher/auth with the page's Floodgate token. Answers once both are subscribed.
 */
function pusherSteps({ base, token, key }) {
  const url = new URL(base);
  return new Promise((resolve, reject) => {
    const pusher = new window.Pusher(key, {
      cluster: "local",
      wsHost: url.hostname,
      wsPort: Number(url.port),
      forceTLS: false,
      enabledTransports: ["ws"],
      disableStats: true,
      channelAuthorization: {
        endpoint: `${base}/v1/pusher/auth`,
        transport: "ajax",
        headers: { authorization: `Bearer ${token}` },
      },
    });
    window.__pusherEvents = [];
    let subscribed = 0;
    for (const name of ["xorigin-public", "private-xorigin.app.one"]) {
      const ch = pusher.subscribe(name);
      ch.bind("greeting", (data) => window.__pusherEvents.push([name, data]));
      ch.bind("pusher:subscription_error", (e) => reject(new Error(`${name}: ${JSON.stringify(e)}`)));
      ch.bind("pusher:subscription_succeeded", () => {
        if (++subscribed === 2) resolve(pusher.connection.state);
      });
    }
    setTimeout(() => reject(new Error(`pusher-js did not subscribe (state ${pusher.connection.state})`)), 15_000);
  });
}

/** What a page on an unlisted origin gets: its publish blocked, its WebSocket refused. */
async function otherSteps({ base, token, channel, key }) {
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
  out.pusher = await new Promise((resolve) => {
    const pusher = new window.Pusher(key, {
      cluster: "local",
      wsHost: new URL(base).hostname,
      wsPort: Number(new URL(base).port),
      forceTLS: false,
      enabledTransports: ["ws"],
      disableStats: true,
    });
    pusher.connection.bind("connected", () => resolve("connected"));
    setTimeout(() => {
      resolve(pusher.connection.state);
      pusher.disconnect();
    }, 5_000);
  });
  return out;
}

/** The page on a listed origin works; a page on another origin is refused. */
export async function checkCrossOrigin(browser) {
  const pageOrigin = `http://127.0.0.1:${PAGE_PORT}`;
  const worker = await startFloodgate({
    CORS_ORIGINS: pageOrigin,
    PUSHER_APP_ID: APP.appId,
    PUSHER_APP_KEY: APP.key,
    PUSHER_APP_SECRET: APP.secret,
  });
  const servers = [await pageServer(PAGE_PORT), await pageServer(OTHER_PORT)];
  const channel = "public:live.crossorigin";
  try {
    const token = await mintToken(worker, {
      sub: "browser-app",
      channels: ["public:live.*", "pusher:private-xorigin.app.one"],
    });
    const args = { base: worker.base, token, channel, key: APP.key };
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
    const state = await app.evaluate(pusherSteps, args);
    const url = new URL(worker.base);
    const server = new PusherServer({ ...APP, host: url.hostname, port: url.port, useTLS: false });
    const data = { text: "from the app's server" };
    await server.trigger(["xorigin-public", "private-xorigin.app.one"], "greeting", data);
    const events = await (
      await app.waitForFunction(() => window.__pusherEvents.length >= 2 && window.__pusherEvents, null, {
        timeout: 15_000,
      })
    ).jsonValue();
    check(
      state === "connected" &&
        events.length === 2 &&
        events.every(([, d]) => JSON.stringify(d) === JSON.stringify(data)),
      `pusher-js on a listed origin connects, a private channel authorized by POST /v1/pusher/auth with a Floodgate token, and gets the events (${JSON.stringify(events)})`,
    );
    const other = await browser.newPage();
    await other.goto(`http://127.0.0.1:${OTHER_PORT}/`);
    const refused = await other.evaluate(otherSteps, args);
    check(
      refused.fetch === "blocked" && refused.socket === "refused" && refused.pusher !== "connected",
      `a page on an origin not in CORS_ORIGINS is refused (${JSON.stringify(refused)})`,
    );
    await app.close();
    await other.close();
  } finally {
    for (const s of servers) s.close();
    await worker.stop();
  }
}
