// The Pusher app the benches open the Pusher door with (docs/api.md, "The Pusher door"), a signed
// `POST /apps/{id}/events` as the Pusher server libraries send it, and Pusher connections that count
// the events they receive: what `npm run bench` (pusher10) and `bench:fanout --pusher` share.
import { createHash, createHmac } from "node:crypto";

/** The variables that open the door on a bench's Worker (the secret a bench-only value). */
export const PUSHER_APP = {
  PUSHER_APP_ID: "bench-app",
  PUSHER_APP_KEY: "bench-key",
  PUSHER_APP_SECRET: "bench-pusher-secret-0",
};

/** How long one signature is used: well inside the server's 600 s window. */
const RESIGN_MS = 60_000;

/**
 * Load options for `POST /apps/{id}/events` of one event to the Pusher channel `name` on `worker`,
 * signed as the `pusher` library signs (auth_key, auth_timestamp, auth_version, body_md5,
 * auth_signature). The body never changes, so one signature serves every request until it is
 * renewed a minute later (autocannon's setupRequest), on the client's time, not the Worker's.
 */
export function pusherEvents(worker, name) {
  const path = `/apps/${PUSHER_APP.PUSHER_APP_ID}/events`;
  const body = JSON.stringify({ name: "react", data: JSON.stringify({ emoji: "🔥", at: 1 }), channel: name });
  const bodyMd5 = createHash("md5").update(body).digest("hex");
  let signed = "";
  let signedAt = 0;
  const signedPath = () => {
    if (Date.now() - signedAt < RESIGN_MS) return signed;
    signedAt = Date.now();
    const query = `auth_key=${PUSHER_APP.PUSHER_APP_KEY}&auth_timestamp=${Math.floor(signedAt / 1000)}&auth_version=1.0&body_md5=${bodyMd5}`;
    const signature = createHmac("sha256", PUSHER_APP.PUSHER_APP_SECRET)
      .update(`POST\n${path}\n${query}`)
      .digest("hex");
    signed = `${path}?${query}&auth_signature=${signature}`;
    return signed;
  };
  const setupRequest = (req) => ({
    ...req,
    method: "POST",
    path: signedPath(),
    headers: { "content-type": "application/json" },
    body,
  });
  return { url: worker.base, pid: worker.pid, opts: { requests: [{ setupRequest }] } };
}

/**
 * `n` Pusher connections on `worker`, each subscribed to the public Pusher channel `name` as pusher-js
 * does; `counter.frames` counts the events they receive (connection frames not included).
 */
export async function pusherSubscribers(base, name, n) {
  const counter = { frames: 0 };
  const url = `${base.replace(/^http/, "ws")}/app/${PUSHER_APP.PUSHER_APP_KEY}?protocol=7&client=js&version=8.6.0`;
  const sockets = await Promise.all(
    Array.from(
      { length: n },
      () =>
        new Promise((resolve, reject) => {
          const ws = new WebSocket(url);
          ws.onerror = () => reject(new Error(`Pusher connection to ${name} failed`));
          ws.onmessage = (e) => {
            const f = JSON.parse(e.data);
            if (f.event === "pusher:connection_established") {
              ws.send(JSON.stringify({ event: "pusher:subscribe", data: { channel: name } }));
            } else if (f.event === "pusher_internal:subscription_succeeded") {
              resolve(ws);
            } else if (f.event === "react") {
              counter.frames++;
            } else if (f.event === "pusher:error" || f.event === "pusher:subscription_error") {
              reject(new Error(`Pusher subscribe to ${name} refused: ${e.data}`));
            }
          };
        }),
    ),
  );
  return {
    counter,
    close: () => {
      for (const ws of sockets) ws.close();
    },
  };
}
