// Not a script: the Worker `npm run bench` runs beside Floodgate as "the literal before-publish
// recipe" (lib/bench.mjs, startRecipe) — what the platform's own examples add up to when followed to
// the letter, so the targets can compare Floodgate with it in the same run (docs/benchmarks.md).
//
// Per publish: read and parse the body; one call to the subject's rate-limiter object (the GCRA of
// Cloudflare's Durable Object chat example); read the channel's drop rate from KV (no cache); draw;
// and await one call to the channel's object, which appends the message as one row and sends it to
// its hibernatable WebSockets. It leaves out what Floodgate does besides (token signatures, the
// API's checks and headers (docs/api.md), history trimming, metrics, copies of drops), so every omission
// favours the recipe.
import { DurableObject } from "cloudflare:workers";
import { Hono } from "hono";

// A budget the bench never exhausts (a million a second, a second of burst): every publish is
// charged, none is denied. `GCRA_INTERVAL_MS` (a binding) replaces it: the deny flood's peer uses an
// hour, so every request is refused by the subject's object, as the chat example refuses a flood.
const INTERVAL_MS = 0.001;
const GRACE_MS = 1000;

/**
 * The chat example's rate limiter, a GCRA: one object per subject keeps in memory the earliest time
 * its next request is due; each request moves that time on by the interval, and a request due more
 * than the grace ahead of now is refused.
 */
export class GcraLimiter extends DurableObject {
  nextAllowedTime = 0;

  /** Milliseconds the caller must wait (0: allowed). */
  take(intervalMs, graceMs) {
    const now = Date.now();
    this.nextAllowedTime = Math.max(now, this.nextAllowedTime) + intervalMs;
    return Math.max(0, this.nextAllowedTime - now - graceMs);
  }
}

/** One channel: its messages in SQLite, its subscribers as hibernatable WebSockets. */
export class RecipeChannel extends DurableObject {
  constructor(ctx, env) {
    super(ctx, env);
    ctx.storage.sql.exec(
      "CREATE TABLE IF NOT EXISTS messages (seq INTEGER PRIMARY KEY, data TEXT NOT NULL, published_at INTEGER NOT NULL)",
    );
  }

  /** A subscriber's WebSocket upgrade. */
  fetch() {
    const [client, server] = Object.values(new WebSocketPair());
    this.ctx.acceptWebSocket(server);
    return new Response(null, { status: 101, webSocket: client });
  }

  /** Appends one message and sends it to every subscriber. */
  publish(channel, data) {
    const published_at = Date.now();
    const { seq } = this.ctx.storage.sql
      .exec("INSERT INTO messages (data, published_at) VALUES (?, ?) RETURNING seq", data, published_at)
      .one();
    const frame = `{"type":"message","channel":${JSON.stringify(channel)},"seq":${seq},"data":${data},"published_at":${published_at}}`;
    for (const ws of this.ctx.getWebSockets()) ws.send(frame);
    return { seq, published_at };
  }

  webSocketMessage() {}

  webSocketClose(ws, code) {
    ws.close(code, "bye");
  }
}

const channel = (env, name) => env.CHANNEL.get(env.CHANNEL.idFromName(name));

const app = new Hono();

app.get("/v1/subscribe/:channel", (c) => {
  if ((c.req.header("upgrade") ?? "").toLowerCase() !== "websocket") {
    return c.json({ code: "invalid_argument", message: "WebSocket upgrade required" }, 400);
  }
  return channel(c.env, c.req.param("channel")).fetch(c.req.raw);
});

app.post("/v1/publish/:channel", async (c) => {
  const name = c.req.param("channel");
  let data;
  try {
    data = JSON.stringify(await c.req.json());
  } catch {
    return c.json({ code: "invalid_argument", message: "body must be JSON" }, 400);
  }
  const subject = c.req.header("authorization") ?? "anonymous";
  const interval = c.env.GCRA_INTERVAL_MS ? Number(c.env.GCRA_INTERVAL_MS) : INTERVAL_MS;
  const wait = await c.env.LIMITER.get(c.env.LIMITER.idFromName(subject)).take(interval, GRACE_MS);
  if (wait > 0) {
    return c.json({ code: "resource_exhausted", message: "rate limited" }, 429, {
      "retry-after": String(Math.ceil(wait / 1000)),
    });
  }
  const rate = Number((await c.env.THROTTLE_KV.get(`throttleRate:${name}`)) ?? 0);
  if (Math.random() < rate) return c.json({ status: "dropped", channel: name }, 202);
  const stored = await channel(c.env, name).publish(name, data);
  return c.json({ status: "delivered", channel: name, ...stored });
});

export default app;
