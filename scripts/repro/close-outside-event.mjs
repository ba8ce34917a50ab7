#!/usr/bin/env node
// Why a subscriber must not wait for the 4001 close after an `expired` frame (packages/client
// websocket.ts renews on the frame): a minimal Durable Object holding hibernatable WebSockets closes
// them, over a real connection, from three places — the socket's own webSocketMessage event, another
// socket's event, and an RPC call (as a relay's alarm does). The Close frame reaches each client, but
// on workerd 1.20261117 only the socket closed inside its own event finishes the close: the others
// stay CLOSING (no `close` event; the object never hears webSocketClose) for as long as we wait.
// Inside workerd (the test suite's in-process sockets) all three close.
//
// Usage: npx node scripts/repro/close-outside-event.mjs   Exits 1 if any socket failed to close.
import { root } from "../lib/root.mjs";
import { bundle, startWorker } from "../lib/workerd.mjs";

const worker = `
import { DurableObject } from "cloudflare:workers";
export class Holder extends DurableObject {
  async fetch(request) {
    const pair = new WebSocketPair();
    this.ctx.acceptWebSocket(pair[1], [new URL(request.url).searchParams.get("name")]);
    return new Response(null, { status: 101, webSocket: pair[0] });
  }
  webSocketMessage(ws, message) {
    // "own": close the socket whose event this is; "other": close the one named "other".
    if (message === "own") ws.close(4001, "own event");
    else for (const o of this.ctx.getWebSockets("other")) o.close(4001, "another socket's event");
  }
  closeFromRpc() {
    for (const ws of this.ctx.getWebSockets("rpc")) ws.close(4001, "rpc");
  }
}
export default {
  async fetch(request, env) {
    const holder = env.HOLDER.get(env.HOLDER.idFromName("one"));
    if (new URL(request.url).pathname === "/close-from-rpc") {
      await holder.closeFromRpc();
      return new Response("ok");
    }
    return holder.fetch(request);
  },
};`;

const repro = await startWorker({
  name: "repro",
  modules: [
    { type: "ESModule", path: "repro.mjs", contents: await bundle({ stdin: { contents: worker, resolveDir: root } }) },
  ],
  durableObjects: { HOLDER: { className: "Holder", useSQLite: true } },
});
const ws = repro.base.replace(/^http/, "ws");
const open = (name) =>
  new Promise((resolve, reject) => {
    const s = new WebSocket(`${ws}/?name=${name}`);
    const state = { name, socket: s, closed: null };
    s.addEventListener("close", (e) => {
      state.closed = { code: e.code, reason: e.reason };
    });
    s.addEventListener("open", () => resolve(state));
    s.addEventListener("error", () => reject(new Error(`${name} failed to open`)));
  });
const own = await open("own");
const other = await open("other");
const rpc = await open("rpc");
const trigger = await open("trigger");
own.socket.send("own");
trigger.socket.send("other");
await fetch(`${repro.base}/close-from-rpc`);
await new Promise((r) => setTimeout(r, 3000));
const states = ["CONNECTING", "OPEN", "CLOSING", "CLOSED"];
let failed = false;
for (const s of [own, other, rpc]) {
  const done = s.closed !== null;
  failed ||= !done;
  console.log(
    `${s.name}: ${states[s.socket.readyState]}${done ? ` (close ${s.closed.code} ${s.closed.reason})` : ", no close event after 3 s"}`,
  );
}
await repro.stop();
process.exit(failed ? 1 : 0);
