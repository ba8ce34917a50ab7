#!/usr/bin/env node
// `npm run test:connections`: what only a real connection shows (docs/api.md, "How long a
// subscription lasts"), against the Worker as `npm start` runs it, from Node's own WebSocket and
// fetch. The suite's sockets live inside workerd, where every close completes; over TCP a close that
// a Durable Object starts outside the socket's own event does not (scripts/repro/close-outside-event.mjs).
// - A subscription opened with a token ends with it: its WebSockets (a private channel's and a public
//   one's) get `expired`, then close 4001 within 1 s of `exp`; its SSE stream gets `event: expired`
//   and ends.
// - An anonymous WebSocket on the same public channel (the same relay) stays open and keeps
//   receiving.
import { check, fail, finish } from "./lib/checks.mjs";
import { startDev } from "./lib/dev-server.mjs";
import { options } from "./lib/options.mjs";
import { mintToken } from "./lib/tokens.mjs";

const { port } = options("test:connections", { port: 8798 });
const TTL_S = 3;
const WITHIN_MS = 1_000;

/** A WebSocket subscription recording its frames and when (and how) it closed. */
function socket(base, channel, token) {
  const url = `${base.replace(/^http/, "ws")}/v1/subscribe/${channel}${token ? `?token=${token}` : ""}`;
  return new Promise((resolve, reject) => {
    const ws = new WebSocket(url);
    const state = { ws, frames: [], closed: null };
    ws.addEventListener("message", (e) => state.frames.push(JSON.parse(e.data)));
    ws.addEventListener("close", (e) => {
      state.closed = { code: e.code, reason: e.reason, at: Date.now() };
    });
    ws.addEventListener("open", () => resolve(state));
    ws.addEventListener("error", () => reject(new Error(`subscribing to ${channel} failed`)));
  });
}

/** An SSE subscription collecting its text until it ends. */
async function sse(base, channel, token) {
  const res = await fetch(`${base}/v1/subscribe/${channel}`, {
    headers: { accept: "text/event-stream", authorization: `Bearer ${token}` },
  });
  if (res.status !== 200) throw new Error(`SSE on ${channel}: ${res.status}`);
  const state = { text: "", ended: null };
  const decoder = new TextDecoder();
  (async () => {
    try {
      for await (const chunk of res.body) state.text += decoder.decode(chunk, { stream: true });
    } catch {}
    state.ended = Date.now();
  })();
  return state;
}

const until = async (ready, ms) => {
  const end = Date.now() + ms;
  while (!ready() && Date.now() < end) await new Promise((r) => setTimeout(r, 20));
  return ready();
};

const server = startDev({ port });
try {
  await server.ready();
  const id = `${Date.now().toString(36)}`;
  const priv = `private:conn.${id}.x`;
  const pub = `public:conn.${id}`;
  const token = await mintToken(server, {
    sub: `conn-${id}`,
    channels: [priv, pub],
    scopes: ["subscribe"],
    ttl: `${TTL_S}s`,
  });
  const exp = JSON.parse(Buffer.from(token.split(".")[1], "base64url").toString()).exp * 1000;
  const privWs = await socket(server.base, priv, token);
  const pubWs = await socket(server.base, pub, token);
  const anon = await socket(server.base, pub);
  const stream = await sse(server.base, pub, token);

  await until(() => privWs.closed && pubWs.closed && stream.ended, exp - Date.now() + 5_000);
  for (const [name, s] of [
    ["private", privWs],
    ["public", pubWs],
  ]) {
    check(s.frames.at(-1)?.type === "expired", `the ${name} token WebSocket's last frame is \`expired\``);
    check(
      s.closed?.code === 4001 && s.closed.reason === "token expired",
      `the ${name} token WebSocket closes with 4001 \`token expired\` (${s.closed ? `${s.closed.code} ${s.closed.reason}` : "still open"})`,
    );
    check(
      s.closed !== null && s.closed.at - exp <= WITHIN_MS,
      `... within ${WITHIN_MS} ms of exp (${s.closed ? `${s.closed.at - exp} ms` : "no close event"})`,
    );
  }
  check(
    /event: expired\n/.test(stream.text) && stream.ended !== null,
    "the token SSE stream gets `event: expired` and ends",
  );

  // The anonymous socket on the same relay is untouched and still receives.
  check(anon.closed === null, "the anonymous WebSocket on the same channel stays open");
  const pub1 = await fetch(`${server.base}/v1/publish/${pub}`, {
    method: "POST",
    headers: {
      authorization: `Bearer ${await mintToken(server, { sub: `pub-${id}`, channels: [pub], scopes: ["publish"] })}`,
      "content-type": "application/json",
    },
    body: JSON.stringify({ mark: `after-${id}` }),
  });
  check(pub1.status === 200 || pub1.status === 202, `a publish after exp is accepted (${pub1.status})`);
  const got = await until(() => anon.frames.some((f) => JSON.stringify(f).includes(`after-${id}`)), 5_000);
  check(got && anon.closed === null, "... and reaches the anonymous WebSocket");
  anon.ws.close();
} catch (e) {
  fail(e.message);
} finally {
  server.stop();
}
finish("test:connections");
