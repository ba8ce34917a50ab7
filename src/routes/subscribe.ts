/**
 * `GET /v1/subscribe/{channel}` (WebSocket or SSE) and `GET /v1/history/{channel}` (docs/api.md): on the
 * analytics channel, history pages through every retained copy and filters by `source_channel`.
 *
 * Subscribe order: channel → mode → subscribe budget (keyed by the `sub` the token *claims*, before
 * verification, so a flood of forged tokens is still charged) → token check for private channels →
 * the channel's object takes the connection. Every refusal is a plain HTTP response before upgrade.
 */
import { Hono } from "hono";
import type { AppEnv } from "../app-env";
import { subscribeBudget } from "../budgets";
import type { ChannelName } from "../channels";
import { invalidArgument, orUnavailable } from "../errors";
import { authorise, bearer, channelParam, intParam, sourceChannelParam } from "../http";
import { channelStub } from "../services";
import { peekSubject } from "../tokens";

/** The token a subscriber presents: `?token=` or `Authorization: Bearer`. */
function presentedToken(request: Request, query: string | undefined): string | null {
  if (query !== undefined && query.length > 0) return query;
  return bearer(request);
}

/** Private channels need an access token with `subscribe` scope and a matching pattern. */
async function checkAccess(env: Env, channel: ChannelName, token: string | null): Promise<void> {
  if (channel.visibility === "public") return;
  await authorise(env, token, "subscribe", channel);
}

export const subscribe = new Hono<AppEnv>();

subscribe.get("/:channel", async (c) => {
  const svc = c.get("svc");
  const channel = channelParam(c.req.param("channel"));
  const upgrade = (c.req.header("upgrade") ?? "").toLowerCase() === "websocket";
  const sse = (c.req.header("accept") ?? "").toLowerCase().includes("text/event-stream");
  if (!upgrade && !sse) {
    throw invalidArgument("subscribe needs a WebSocket upgrade or Accept: text/event-stream");
  }
  let after = intParam(c.req.query("after"), "after");
  if (after === null && !upgrade) after = intParam(c.req.header("last-event-id"), "Last-Event-ID");

  const token = presentedToken(c.req.raw, c.req.query("token"));
  let limitHeaders: Record<string, string> = {};
  const claimed = token ? peekSubject(token) : null;
  if (claimed) {
    const budget = subscribeBudget(svc.config, channel, claimed);
    limitHeaders = await svc.gate.check("subscribe", budget.key, budget.limit, (p) => c.executionCtx.waitUntil(p));
  }
  await checkAccess(c.env, channel, token);

  const target = new URL("https://channel.internal/subscribe");
  target.searchParams.set("channel", channel.name);
  target.searchParams.set("mode", upgrade ? "ws" : "sse");
  if (after !== null) target.searchParams.set("after", String(after));
  const res = await orUnavailable("channel", () =>
    channelStub(c.env, channel.name).fetch(new Request(target, c.req.raw)),
  );
  if (Object.keys(limitHeaders).length === 0) return res;
  const headers = new Headers(res.headers);
  for (const [k, v] of Object.entries(limitHeaders)) headers.set(k, v);
  if (res.webSocket) return new Response(null, { status: 101, webSocket: res.webSocket, headers });
  return new Response(res.body, { status: res.status, headers });
});

export const history = new Hono<AppEnv>();

history.get("/:channel", async (c) => {
  const channel = channelParam(c.req.param("channel"));
  const after = intParam(c.req.query("after"), "after");
  const limit = intParam(c.req.query("limit"), "limit", 1000) ?? 100;
  if (limit < 1) throw invalidArgument("limit must be between 1 and 1000");
  const source = sourceChannelParam(c.req.query("source_channel"), channel, c.get("svc").config);
  await checkAccess(c.env, channel, presentedToken(c.req.raw, c.req.query("token")));
  const frames = await orUnavailable("channel", () =>
    channelStub(c.env, channel.name).history(after, limit, source?.name ?? null),
  );
  return c.body(`{"messages":[${frames.join(",")}]}`, 200, { "content-type": "application/json" });
});
