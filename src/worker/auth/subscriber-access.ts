/**
 * Who a subscriber or a reader of a channel is (docs/api.md, "Subscriber tokens"; "Bounds"): the
 * token it presents — `Authorization: Bearer`, the `bearer.<token>` WebSocket subprotocol, or
 * `?token=` — and the door of a read of what a channel holds (history, presence).
 */
import type { Context } from "hono";
import { readBudget } from "../../limiter/budgets";
import { shardRuleFor } from "../../settings/rules";
import type { Settings } from "../../settings/settings";
import type { ChannelName } from "../../wire/channel-names";
import { ApiError } from "../../wire/errors";
import { WS_BEARER_PREFIX } from "../../wire/subscribe-params";
import type { AppEnv } from "../app-env";
import { clientIp } from "../http/params";
import { audienceOf } from "../shards/audience";
import { authorise, bearer, verifyAccess } from "./authorise";
import type { TokenClaims } from "./tokens";

/** The subprotocols a WebSocket upgrade offers, in order. */
export function offeredProtocols(request: Request): string[] {
  const h = request.headers.get("sec-websocket-protocol");
  if (!h) return [];
  return h
    .split(",")
    .map((p) => p.trim())
    .filter((p) => p.length > 0);
}

/**
 * The token a subscriber presents: `Authorization: Bearer`, the `bearer.<token>` WebSocket
 * subprotocol, or `?token=` (the fallback that lands in request logs).
 */
export function presentedToken(request: Request, query: string | undefined, protocols: string[]): string | null {
  const header = bearer(request);
  if (header) return header;
  const offered = protocols.find((p) => p.startsWith(WS_BEARER_PREFIX));
  if (offered && offered.length > WS_BEARER_PREFIX.length) return offered.slice(WS_BEARER_PREFIX.length);
  if (query !== undefined && query.length > 0) return query;
  return null;
}

/**
 * Private channels need an access token with `subscribe` scope and a matching pattern. Answers the
 * claims of the token that picks the caller's shard: the verified one, or on a public channel sharded
 * by group a token that verifies (one that does not reads the `default` shard, as no token would).
 */
async function checkAccess(
  env: Env,
  config: Settings,
  channel: ChannelName,
  token: string | null,
): Promise<TokenClaims | null> {
  if (channel.visibility === "private") return (await authorise(env, token, "subscribe", channel)).claims;
  if (!token || shardRuleFor(config, channel)?.value.by !== "group") return null;
  try {
    return (await verifyAccess(env, token)).claims;
  } catch (e) {
    if (!(e instanceof ApiError)) throw e;
    return null;
  }
}

/**
 * The door of a read of what a channel holds (history, presence: docs/api.md): the client IP's read
 * budget is charged, with or without a token, then a private channel needs a token with `subscribe`
 * scope and a matching pattern. Answers the budget's headers, and the object that holds what the
 * caller reads: the channel's, or on a sharded channel the caller's shard's (docs/api.md, "Shards").
 */
export async function readAccess(
  c: Context<AppEnv>,
  channel: ChannelName,
): Promise<{ limitHeaders: Record<string, string>; key: string; shard: string | null }> {
  const svc = c.get("svc");
  const budget = readBudget(svc.config, clientIp(c.req.raw));
  const limitHeaders = await svc.gate.check("read", budget.key, budget.limit, c.var.defer);
  const claims = await checkAccess(c.env, svc.config, channel, presentedToken(c.req.raw, c.req.query("token"), []));
  const { key, shard } = audienceOf(svc.config, channel, claims, c.req.raw);
  return { limitHeaders, key, shard };
}
