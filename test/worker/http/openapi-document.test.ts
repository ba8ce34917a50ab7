/**
 * The OpenAPI document at GET /v1/openapi.json: every route the app serves and every route and
 * error status docs/api.md names is in it. (That it validates as OpenAPI 3.1 is checked from Node by
 * scripts/check-openapi.mjs: the validator reads its schemas from disk.)
 */
import { describe, expect, it } from "vitest";
import apiDoc from "../../../docs/api.md?raw";
import { app } from "../../../src/worker/app";
import { call, callAndWait, envWith } from "../../support/helpers";
import { APP as PUSHER_APP } from "../../support/pusher";

interface Operation {
  responses: Record<string, { content?: Record<string, { schema?: { $ref?: string } }> }>;
  security?: Record<string, string[]>[];
}
type Document = { openapi: string; paths: Record<string, Record<string, Operation>>; components: object };

async function document(): Promise<Document> {
  const res = await call("/v1/openapi.json");
  expect(res.status).toBe(200);
  expect(res.headers.get("content-type")).toMatch(/^application\/json/);
  return (await res.json()) as Document;
}

const operation = (doc: Document, method: string, path: string) => doc.paths[path]?.[method.toLowerCase()];

/** Routes docs/api.md names as `METHOD /path` (query strings cut), plus the methods named beside them. */
function documentedRoutes(): [string, string][] {
  const found = new Set<string>();
  for (const m of apiDoc.matchAll(/`(GET|POST|PUT|DELETE) (\/[^\s`?]*)/g)) found.add(`${m[1]} ${m[2]}`);
  // "PUT /v1/admin/throttle/{channel} …; `GET` reads it; … `DELETE` → 204": the same path.
  for (const path of ["/v1/admin/throttle/{channel}", "/v1/admin/target/{channel}"]) {
    for (const method of ["GET", "DELETE"]) found.add(`${method} ${path}`);
  }
  return [...found].map((r) => r.split(" ") as [string, string]);
}

describe("GET /v1/openapi.json", () => {
  it("is an OpenAPI 3.1 document with every route the app serves, under its method", async () => {
    const doc = await document();
    expect(doc.openapi).toBe("3.1.0");
    // One entry per handler, middleware included: a route with two middlewares is listed three times.
    const served = new Set(
      app.routes
        .filter((r) => r.method !== "ALL")
        .map((r) => `${r.method.toLowerCase()} ${r.path.replaceAll(/:([^/]+)/g, "{$1}")}`),
    );
    expect(served.size).toBeGreaterThan(15);
    const inDocument = Object.entries(doc.paths).flatMap(([path, ops]) => Object.keys(ops).map((m) => `${m} ${path}`));
    expect(inDocument.sort()).toEqual([...served].sort());
  });

  it("has every route docs/api.md names, with the API's error body for every error status", async () => {
    const doc = await document();
    const named = documentedRoutes();
    expect(named.length).toBeGreaterThan(15);
    for (const [method, path] of named) expect(operation(doc, method, path), `${method} ${path}`).toBeDefined();
    // The statuses of the error table at the top of docs/api.md, and each one's body.
    const table = [...apiDoc.matchAll(/^\| (\d{3}) \| `/gm)].map((m) => m[1] as string);
    expect(table).toEqual(["400", "401", "403", "404", "413", "429", "500", "503"]);
    const used = new Set<string>();
    const listing404: string[] = [];
    for (const [path, ops] of Object.entries(doc.paths)) {
      for (const [method, op] of Object.entries(ops)) {
        for (const [status, response] of Object.entries(op.responses)) {
          if (Number(status) < 400) continue;
          if (status === "404") listing404.push(`${method} ${path}`);
          // The Pusher HTTP API answers its refusals as Pusher's servers do: short text (docs/api.md, "The Pusher door").
          if (path.startsWith("/apps/")) {
            expect(response.content?.["text/plain"], `${path} ${status}`).toBeDefined();
            continue;
          }
          used.add(status);
          expect(response.content?.["application/json"]?.schema?.$ref).toBe("#/components/schemas/Error");
        }
      }
    }
    expect([...used].sort()).toEqual(table);
    // 404 is the answer to routes that do not exist, so a route lists it only where it answers it
    // itself: the Pusher door's routes while the door is closed.
    expect(listing404.filter((r) => !r.includes(" /apps/"))).toEqual(["post /v1/pusher/auth"]);
  });

  it.each([
    ["POST", "/v1/tokens", [400, 401, 413, 429, 500]],
    ["POST", "/v1/tokens/refresh", [400, 401, 429, 503]],
    ["POST", "/v1/publish/{channel}", [400, 401, 403, 413, 429, 503]],
    ["GET", "/v1/subscribe/{channel}", [400, 401, 403, 429]],
    ["GET", "/v1/history/{channel}", [400, 401, 403, 429]],
    ["GET", "/healthz", [500]],
    ["GET", "/metrics", [401]],
    ["GET", "/v1/channels/{channel}/stats", [400, 401]],
    ["PUT", "/v1/admin/throttle/{channel}", [400, 401]],
    ["PUT", "/v1/admin/target/{channel}", [400, 401]],
    ["GET", "/v1/admin/channels", [400, 401]],
    ["GET", "/v1/admin/analytics/export", [400, 401, 503]],
    // A closed Pusher door: 404, as a route that does not exist.
    ["POST", "/v1/pusher/auth", [400, 401, 403, 404, 413, 429, 500]],
    // An upgrade from an origin CORS_ORIGINS does not list: 403 before upgrading.
    ["GET", "/app/{key}", [400, 403, 429, 500, 503]],
  ] as [string, string, number[]][])(
    "%s %s lists the error statuses docs/api.md gives it",
    async (method, path, statuses) => {
      const op = operation(await document(), method, path);
      for (const s of statuses) expect(op?.responses[s], `${method} ${path} ${s}`).toBeDefined();
    },
  );

  it("the Pusher door's routes list what they answer before their own checks: a closed door's 404, an unlisted origin's 403", async () => {
    const doc = await document();
    const closed = envWith({ PUSHER_APP_ID: "", PUSHER_APP_KEY: "", PUSHER_APP_SECRET: "" });
    const auth = await callAndWait(
      "/v1/pusher/auth",
      { method: "POST", body: "socket_id=1.2&channel_name=private-a" },
      closed,
    );
    expect(auth.status).toBe(404);
    expect(operation(doc, "POST", "/v1/pusher/auth")?.responses[String(auth.status)]).toBeDefined();
    const upgrade = await callAndWait(
      `/app/${PUSHER_APP.key}?protocol=7`,
      { headers: { upgrade: "websocket", origin: "https://unlisted.example" } },
      envWith({ CORS_ORIGINS: "https://app.example" }),
    );
    expect(upgrade.status).toBe(403);
    expect(operation(doc, "GET", "/app/{key}")?.responses[String(upgrade.status)]).toBeDefined();
  });

  it("every route behind the admin bearer lists 401 and the admin-auth budget's 429", async () => {
    const doc = await document();
    let admin = 0;
    for (const [path, ops] of Object.entries(doc.paths)) {
      for (const [method, op] of Object.entries(ops)) {
        if (!op.security?.some((s) => "admin" in s)) continue;
        admin++;
        expect(op.responses["401"], `${method} ${path} 401`).toBeDefined();
        expect(op.responses["429"], `${method} ${path} 429`).toBeDefined();
      }
    }
    expect(admin).toBeGreaterThan(10);
  });

  it("describes both ways to subscribe, and which routes need which bearer", async () => {
    const doc = await document();
    const sub = operation(doc, "GET", "/v1/subscribe/{channel}");
    expect(sub?.responses["101"]).toBeDefined();
    expect(Object.keys(sub?.responses["200"]?.content ?? {})).toEqual(["text/event-stream"]);
    expect(operation(doc, "GET", "/v1/manifest")?.security).toBeUndefined();
    expect(operation(doc, "POST", "/v1/tokens")?.security).toEqual([{ admin: [] }]);
    expect(operation(doc, "POST", "/v1/admin/sample")?.security).toEqual([{ admin: [] }]);
    expect(operation(doc, "POST", "/v1/publish/{channel}")?.security).toEqual([{ accessToken: [] }]);
    expect(doc.components).toMatchObject({ securitySchemes: { admin: { type: "http", scheme: "bearer" } } });
  });

  it("describes the mint body with the schema that checks it", async () => {
    const doc = (await document()) as Document & {
      components: { schemas: Record<string, { properties?: Record<string, unknown>; required?: string[] }> };
    };
    const mint = doc.components.schemas.MintRequest;
    expect(Object.keys(mint?.properties ?? {}).sort()).toEqual([
      "channels",
      "group",
      "refresh_ttl",
      "rl",
      "scopes",
      "sub",
      "ttl",
    ]);
    expect(mint?.required?.sort()).toEqual(["channels", "sub"]);
  });
});

describe("the document's groups", () => {
  it("puts every route under a tag of its part of docs/api.md, none under default", async () => {
    const doc = (await document()) as Document & { tags: { name: string; description: string }[] };
    const names = doc.tags.map((t) => t.name);
    expect(names).toEqual(["Tokens", "Publish", "Subscribe", "Dashboard", "Admin", "Pusher", "Operations"]);
    for (const t of doc.tags) expect(t.description).toMatch(/docs\/api\.md/);
    const tagOf = (path: string, method: string) =>
      (doc.paths[path]?.[method] as (Operation & { tags?: string[] }) | undefined)?.tags;
    for (const [path, methods] of Object.entries(doc.paths)) {
      for (const method of Object.keys(methods)) {
        const tags = tagOf(path, method);
        expect(tags?.length, `${method} ${path}`).toBe(1);
        expect(names).toContain(tags?.[0]);
      }
    }
    expect(tagOf("/v1/publish/{channel}", "post")).toEqual(["Publish"]);
    expect(tagOf("/v1/history/{channel}", "get")).toEqual(["Subscribe"]);
    expect(tagOf("/v1/admin/overview", "get")).toEqual(["Dashboard"]);
    expect(tagOf("/v1/admin/sample", "post")).toEqual(["Admin"]);
    expect(tagOf("/healthz", "get")).toEqual(["Operations"]);
    expect(tagOf("/app/{key}", "get")).toEqual(["Pusher"]);
    expect(tagOf("/apps/{id}/events", "post")).toEqual(["Pusher"]);
    expect(tagOf("/v1/pusher/auth", "post")).toEqual(["Pusher"]);
  });
});
