// Not a script: the Worker `npm run bench:fanout -- --floor` runs as "the socket floor" (lib/bench.mjs,
// startSocketFloor) — the least a fan-out can cost on this runtime: hibernatable WebSockets held by
// objects of 1,000 each (Floodgate's RELAY_CAPACITY), and per message one text built once and one
// `ws.send` per socket. No token, no history, no order kept across restarts, no byte bounds, no
// counts: every omission favours the floor. With `FRAMES_PER_MESSAGE` below 1 it packs messages into
// frames (an array of them, the shape of Floodgate's packed frames) at that rate, so it sends as many
// frames per delivered message as the Floodgate run it is compared with.
import { DurableObject } from "cloudflare:workers";
import { Hono } from "hono";

/** Sockets one object holds, as Floodgate's relays do. */
const CAPACITY = 1000;
/** A message whose frame is still to go leaves after this long without another. */
const FLUSH_MS = 50;

/** A set of sockets, sending each message (or frame of messages) to every one. */
export class FloorSockets extends DurableObject {
  pending = [];
  credit = 0;
  timer = null;

  fetch() {
    const [client, server] = Object.values(new WebSocketPair());
    this.ctx.acceptWebSocket(server);
    return new Response(null, { status: 101, webSocket: client });
  }

  count() {
    return this.ctx.getWebSockets().length;
  }

  /** One message: its text built once, sent now (one frame each) or packed at `framesPerMessage`. */
  deliver(seq, data, framesPerMessage) {
    const text = `{"type":"message","seq":${seq},"data":${data}}`;
    if (framesPerMessage >= 1) return this.send(text);
    this.pending.push(text);
    this.credit += framesPerMessage;
    if (this.credit >= 1) {
      this.credit -= 1;
      this.flush();
    } else {
      this.timer ??= setTimeout(() => this.flush(), FLUSH_MS);
    }
  }

  flush() {
    if (this.timer) clearTimeout(this.timer);
    this.timer = null;
    if (this.pending.length === 0) return;
    const frame = `[${this.pending.join(",")}]`;
    this.pending = [];
    this.send(frame);
  }

  send(text) {
    for (const ws of this.ctx.getWebSockets()) ws.send(text);
  }

  webSocketClose(ws, code) {
    ws.close(code === 1005 ? 1000 : code, "closing");
  }
}

const app = new Hono();
let subscribers = 0;
let seq = 0;
const objects = (env) =>
  Array.from({ length: Math.ceil(subscribers / CAPACITY) }, (_, k) => env.FLOOR.get(env.FLOOR.idFromName(`k${k}`)));

app.get("/v1/subscribe/:channel", (c) => {
  const k = Math.floor(subscribers++ / CAPACITY);
  return c.env.FLOOR.get(c.env.FLOOR.idFromName(`k${k}`)).fetch(c.req.raw);
});
app.post("/v1/tokens", (c) => c.json({ access_token: "floor" }, 201));
app.get("/v1/channels/:channel/stats", async (c) => {
  const counts = await Promise.all(objects(c.env).map((o) => o.count()));
  return c.json({ websockets: counts.reduce((a, n) => a + n, 0), relays: counts.length });
});
app.post("/v1/publish/:channel", async (c) => {
  const data = await c.req.text();
  const n = ++seq;
  const fpm = Number(c.env.FRAMES_PER_MESSAGE ?? 1);
  await Promise.all(objects(c.env).map((o) => o.deliver(n, data, fpm)));
  return c.json({ status: "delivered", seq: n });
});
export default app;
