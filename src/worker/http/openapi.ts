/**
 * The OpenAPI 3.1 document (docs/api.md, "OpenAPI document"). Each route file declares its routes
 * with {@link route} next to their handlers and mounts them with {@link documented}; the app mounts
 * the route files with {@link mount} and serves {@link openApiDocument} at `GET /v1/openapi.json`.
 * Request bodies use the schemas the routes check them with (src/worker/http/validation.ts).
 *
 * zod-to-openapi directly rather than @hono/zod-openapi: that package extends zod through zod's
 * whole namespace object, which keeps every zod locale in the Worker's bundle (about 260 KB of
 * minified code parsed at every cold start); zod-to-openapi only needs `ZodType`.
 */
import {
  extendZodWithOpenApi,
  OpenAPIRegistry,
  OpenApiGeneratorV31,
  type RouteConfig,
} from "@asteasolutions/zod-to-openapi";
import type { Hono } from "hono";
import * as z from "zod";
import type { ERROR_KINDS } from "../../wire/errors";
import type { AppEnv } from "../app-env";

// `.openapi()` on every schema; runs before any module declares one (they all import this module).
extendZodWithOpenApi({ ZodType: z.ZodType } as unknown as Parameters<typeof extendZodWithOpenApi>[0]);

/** Every error body: `{"code","msg","meta":{"code",…}}` (docs/api.md, the table at the top). */
export const ErrorBody = z
  .object({
    code: z.string(),
    msg: z.string(),
    meta: z.object({ code: z.string() }).catchall(z.string()),
  })
  .openapi("Error", {
    description: "Every failure. `meta` may add string fields such as `bucket`, `retry_after_ms` or `variable`.",
    example: {
      code: "invalid_argument",
      msg: "rate must be a number between 0 and 1",
      meta: { code: "INVALID_ARGUMENT" },
    },
  });

type ErrorStatus = (typeof ERROR_KINDS)[keyof typeof ERROR_KINDS]["status"];

const ERROR_DESCRIPTIONS: Record<ErrorStatus, string> = {
  400: "`invalid_argument` / `INVALID_ARGUMENT`: a bad channel, parameter or body.",
  401: "`unauthenticated` / `UNAUTHENTICATED`: a missing, malformed, badly signed, expired or wrong-type token.",
  403: "`permission_denied` / `PERMISSION_DENIED`: the token lacks the scope or the channel.",
  404: "`bad_route` / `NOT_FOUND`: unknown route or method.",
  413: "`invalid_argument` / `PAYLOAD_TOO_LARGE`: the body is over its limit.",
  429: "`resource_exhausted` / `RATE_LIMITED` (+ `bucket`, `retry_after_ms`), with `Retry-After` and `RateLimit` headers.",
  500: "`internal` / `INTERNAL`: bad configuration (`meta.variable` names it) or the rate limiter is unavailable.",
  503:
    "`unavailable` / `UNAVAILABLE`, with a `Floodgate-Refusal` header naming why: `unavailable` when a channel object, the ledger or KV could not be reached (retry); " +
    "a bound's name where one was met, with `Retry-After`: `max_subscribers`, `anonymous_subscribers`, `publish_overflow`, `export_too_dense`.",
};

/** The error responses a route can give, in the API's error shape (docs/api.md). */
export function errors(...statuses: ErrorStatus[]) {
  return Object.fromEntries(
    statuses.map((s) => [
      s,
      { description: ERROR_DESCRIPTIONS[s], content: { "application/json": { schema: ErrorBody } } },
    ]),
  );
}

/** A JSON response (or request body) of `schema`. */
export function json<S extends z.ZodType>(schema: S, description: string) {
  return { description, content: { "application/json": { schema } } };
}

/** The `{channel}` path parameter. Its grammar is checked by the route (docs/api.md, Channels). */
export const ChannelPath = z.object({
  channel: z.string().openapi({
    param: { name: "channel", in: "path" },
    description: "`<public|private>:<c1>.<c2>[.<c3>[.<c4>]]`, written as is in the path.",
    example: "public:live.reactions",
  }),
});

/** The `?within=` of the recent-channel lists. */
export const WithinQuery = z.object({
  within: z.string().optional().openapi({ description: "A duration; default 10m.", example: "10m" }),
});

/** The admin bearer, `Authorization: Bearer <ADMIN_TOKEN>`. */
export const ADMIN_ONLY = [{ admin: [] }];
/** An access token: `Authorization: Bearer`, the `bearer.<token>` WebSocket subprotocol or `?token=`. */
export const ACCESS_TOKEN = [{ accessToken: [] }];

/** `/a/{b}` (OpenAPI) as Hono's routing path `/a/:b`. */
type RoutingPath<T extends string> = T extends `${infer Head}{${infer Param}}${infer Rest}`
  ? `${Head}:${Param}${RoutingPath<Rest>}`
  : T;

/** A route's declaration, its method and path kept as literals (for {@link documented}'s type). */
export function route<const R extends RouteConfig>(declaration: R): R {
  return declaration;
}

/** The routes each app declared, with paths relative to where it is mounted. */
const declared = new WeakMap<Hono<AppEnv>, RouteConfig[]>();

/**
 * Adds `declaration` to the app's routes for the document and answers its routing path, for
 * `app.get(documented(app, declaration), …handlers)`. The handlers are mounted the plain Hono way
 * (bodies go through src/worker/http/validation.ts); a test checks that every mounted route is documented under
 * its method.
 */
export function documented<R extends RouteConfig>(app: Hono<AppEnv>, declaration: R): RoutingPath<R["path"]> {
  const list = declared.get(app) ?? [];
  list.push(declaration);
  declared.set(app, list);
  return declaration.path.replaceAll(/\{([^}]+)\}/g, ":$1") as RoutingPath<R["path"]>;
}

/** `app.route(prefix, sub)`, and `sub`'s declared routes become `app`'s under `prefix`. */
export function mount(app: Hono<AppEnv>, prefix: string, sub: Hono<AppEnv>): void {
  app.route(prefix, sub);
  const base = prefix.replace(/\/$/, "");
  for (const d of declared.get(sub) ?? [])
    documented(app, { ...d, path: d.path === "/" ? base || "/" : base + d.path });
}

/** The document's top-level fields. */
const DOCUMENT_INFO = {
  openapi: "3.1.0",
  info: {
    title: "Floodgate",
    version: "0.1.0",
    description:
      "Edge pub/sub: publish over HTTP, subscribe over WebSocket or SSE. The prose reference is docs/api.md in the Floodgate repository (with docs/throttling.md, docs/operations.md and docs/client.md beside it); the dashboard is at /.",
  },
};

/**
 * The document's groups, one per part of docs/api.md, so the reference page (/docs/api) lists the
 * routes by what they are for instead of all under "default". A route's group follows from its path.
 */
export const TAGS = [
  { name: "Tokens", description: "Minting and refreshing access tokens (docs/api.md, Tokens).", prefix: "/v1/tokens" },
  {
    name: "Publish",
    description: "Publishing to a channel (docs/api.md, POST /v1/publish/{channel}).",
    prefix: "/v1/publish",
  },
  {
    name: "Subscribe",
    description: "WebSocket and SSE subscriptions, and history (docs/api.md, GET /v1/subscribe/{channel}).",
    prefix: "/v1/subscribe",
  },
  { name: "Subscribe", description: "", prefix: "/v1/history" },
  {
    name: "Dashboard",
    description: "The dashboard's poll (docs/api.md, Operator routes).",
    prefix: "/v1/admin/overview",
  },
  {
    name: "Admin",
    description: "Drop rates, targets, the sampler and the record's export (docs/api.md, Operator routes).",
    prefix: "/v1/admin",
  },
  {
    name: "Pusher",
    description:
      'The Pusher door: Pusher Channels connections, the Pusher HTTP API and channel authorizations (docs/api.md, "The Pusher door").',
    prefix: "/app",
  },
  { name: "Pusher", description: "", prefix: "/v1/pusher" },
  {
    name: "Operations",
    description: "Health, manifest, metrics, channel stats and this document (docs/api.md, Operator routes).",
    prefix: "/",
  },
] as const;

/** The group of a route's path: the first tag whose prefix it starts with. */
export function tagOf(path: string): string {
  return TAGS.find((t) => path.startsWith(t.prefix))?.name ?? "Operations";
}

/** The document of the routes `app` declared and mounted. */
export function openApiDocument(app: Hono<AppEnv>) {
  const registry = new OpenAPIRegistry();
  registry.registerComponent("securitySchemes", "admin", {
    type: "http",
    scheme: "bearer",
    description: "`ADMIN_TOKEN` (docs/operations.md, Secrets).",
  });
  registry.registerComponent("securitySchemes", "accessToken", {
    type: "http",
    scheme: "bearer",
    bearerFormat: "JWT",
    description:
      "An access token minted by `POST /v1/tokens`. Subscribe and history also take it as the `bearer.<token>` " +
      "WebSocket subprotocol or `?token=` (docs/api.md, Subscriber tokens).",
  });
  for (const d of declared.get(app) ?? []) registry.registerPath({ ...d, tags: d.tags ?? [tagOf(d.path)] });
  const tags = TAGS.filter((t) => t.description).map(({ name, description }) => ({ name, description }));
  return new OpenApiGeneratorV31(registry.definitions).generateDocument({ ...DOCUMENT_INFO, tags });
}

/** A target as the API shows and takes it (docs/throttling.md). */
export const TargetSchema = z
  .union([z.string().openapi({ example: "50/s" }), z.object({ deliveries: z.string().openapi({ example: "5000/s" }) })])
  .openapi("Target", { description: 'Messages per second ("50/s"), or a delivery budget split across subscribers.' });

/** `{"rate","per","burst"}` (docs/api.md, Rate limits). */
export const LimitSchema = z
  .object({ rate: z.number().int(), per: z.string(), burst: z.number().int() })
  .openapi("Limit", { example: { rate: 10, per: "1s", burst: 20 } });

/** A channel's numbering (docs/api.md, "Numbering restarts"). */
export const EpochSchema = z.string().openapi({
  example: "q3JtW0b2xYk_",
  description:
    "The numbering `seq` counts in: 1–64 characters of `[A-Za-z0-9_-]`, changed whenever the channel's seq starts " +
    "again from 1 (its storage deleted by idle expiry). Resume with `?epoch=<epoch>&after=<seq>`.",
});

/** One message as subscribers and history see it (docs/api.md, GET /v1/subscribe). */
export const Frame = z
  .object({
    type: z.literal("message"),
    channel: z.string(),
    shard: z.string().optional().openapi({ description: "Sharded channels only: the subscriber's shard." }),
    epoch: EpochSchema,
    seq: z.number().int(),
    id: z.string(),
    data: z.unknown().openapi({ description: "The message exactly as published." }),
    published_at: z.number().int(),
  })
  .openapi("Frame");
