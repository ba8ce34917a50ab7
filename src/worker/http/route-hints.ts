/**
 * What a 404 for an unknown route says (docs/api.md, the error table): the routes near the one asked
 * for — the same path under another method ("did you mean POST?") or the path under `/v1/` — so a
 * newcomer can act on it. The status stays 404 `bad_route`, as the docs state for unknown routes and
 * methods alike.
 */
import type { Hono } from "hono";

interface KnownRoute {
  method: string;
  /** As a reader writes it: `/v1/publish/{channel}`. */
  shown: string;
  pattern: RegExp;
}

/** Hono's `:param` (or `:param{regex}`) as one path segment. */
function compile(path: string): RegExp {
  const source = path
    .split("/")
    .map((seg) => (seg.startsWith(":") ? "[^/]+" : seg.replace(/[.*+?^${}()|[\]\\]/g, "\\$&")))
    .join("/");
  return new RegExp(`^${source}/?$`);
}

const shown = (path: string) => path.replace(/:([A-Za-z_]+)(\{[^}]*\})?/g, "{$1}");

/** The app's routes, read once (they never change while the isolate lives). */
let known: KnownRoute[] | null = null;

function knownRoutes(app: Hono<never>): KnownRoute[] {
  known ??= app.routes
    .filter((r) => r.method !== "ALL" && !r.path.includes("*"))
    .map((r) => ({ method: r.method, shown: shown(r.path), pattern: compile(r.path) }))
    .filter((r, i, all) => all.findIndex((o) => o.method === r.method && o.shown === r.shown) === i);
  return known;
}

/** The 404's message for `method` `path`: which routes exist near it. */
export function noSuchRoute(app: Hono<never>, method: string, path: string): string {
  const routes = knownRoutes(app);
  const asked = `no such route: ${method} ${path.slice(0, 200)}`;
  const samePath = routes.filter((r) => r.pattern.test(path) && r.method !== method);
  if (samePath.length) {
    const methods = [...new Set(samePath.map((r) => r.method))];
    return `${asked}; ${methods.map((m) => `${m} ${samePath[0]?.shown}`).join(" and ")} exists: did you mean ${methods.join(" or ")}?`;
  }
  if (!path.startsWith("/v1/")) {
    const under = routes.find((r) => r.pattern.test(`/v1${path.startsWith("/") ? "" : "/"}${path}`));
    if (under) return `${asked}; routes live under /v1/: did you mean ${under.method} ${under.shown}?`;
  }
  return `${asked}; the routes are listed in GET /v1/openapi.json and docs/api.md (routes live under /v1/)`;
}
