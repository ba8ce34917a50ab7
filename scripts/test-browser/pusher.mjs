// pusher-js in a browser against the Pusher door (docs/api.md, "The Pusher door"), straight to the
// Worker in a workerd of its own (wrangler dev's proxy answers a browser's upgrade itself): its web
// build connects, subscribes one connection to a public and a private channel (authorized by the
// `pusher` server library, as an app's backend does), and receives an event with its data as sent.
import { createRequire } from "node:module";
import { join } from "node:path";
import { check } from "../lib/checks.mjs";
import { root } from "../lib/root.mjs";
import { startFloodgate } from "../lib/workerd.mjs";

const require = createRequire(import.meta.url);
const PusherServer = require("pusher");
const APP = { appId: "browser-app", key: "browser-key", secret: "browser-pusher-secret-0" };

export async function checkPusherJs(browser) {
  const worker = await startFloodgate({
    PUSHER_APP_ID: APP.appId,
    PUSHER_APP_KEY: APP.key,
    PUSHER_APP_SECRET: APP.secret,
  });
  const url = new URL(worker.base);
  const server = new PusherServer({ ...APP, host: url.hostname, port: url.port, useTLS: false });
  const page = await browser.newPage();
  try {
    await page.exposeFunction("authorize", (socketId, channel) => server.authorizeChannel(socketId, channel));
    await page.addScriptTag({ path: join(root, "node_modules/pusher-js/dist/web/pusher.min.js") });
    const channels = ["browser-public", "private-browser"];
    const ready = await page.evaluate(
      ({ key, host, port, channels }) =>
        new Promise((resolve, reject) => {
          const pusher = new window.Pusher(key, {
            cluster: "local",
            wsHost: host,
            wsPort: port,
            forceTLS: false,
            enabledTransports: ["ws"],
            disableStats: true,
            channelAuthorization: {
              endpoint: "unused",
              transport: "ajax",
              customHandler: ({ socketId, channelName }, cb) =>
                window.authorize(socketId, channelName).then((a) => cb(null, a), cb),
            },
          });
          window.__events = [];
          let subscribed = 0;
          for (const name of channels) {
            const ch = pusher.subscribe(name);
            ch.bind("greeting", (data) => window.__events.push([name, data]));
            ch.bind("pusher:subscription_error", reject);
            ch.bind("pusher:subscription_succeeded", () => {
              if (++subscribed === channels.length) resolve(pusher.connection.state);
            });
          }
          setTimeout(() => reject(new Error("pusher-js did not subscribe")), 15_000);
        }),
      { key: APP.key, host: url.hostname, port: Number(url.port), channels },
    );
    const data = { text: "héllo from the server", n: [1, 2] };
    await server.trigger(channels, "greeting", data);
    const events = await page.waitForFunction(() => window.__events.length >= 2 && window.__events, null, {
      timeout: 15_000,
    });
    const got = await events.jsonValue();
    check(
      ready === "connected" &&
        got.length === 2 &&
        got.every(([, d]) => JSON.stringify(d) === JSON.stringify(data)) &&
        new Set(got.map(([name]) => name)).size === 2,
      `pusher-js in Chromium subscribes one connection to a public and a private channel and gets pusher.trigger's event on each (${JSON.stringify(got)})`,
    );
  } finally {
    await page.close();
    await worker.stop();
  }
}
