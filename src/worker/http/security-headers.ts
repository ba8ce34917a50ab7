/**
 * Security headers on every API answer, errors included (docs/security.md, "Headers"): Hono's
 * `secureHeaders` with the options below, applied by {@link securityHeaders}. The API only serves
 * JSON, event streams and WebSockets, so its CSP allows nothing to load and no page to frame it. The
 * dashboard's files are served by the assets layer before the Worker runs; their headers are in
 * public/_headers. Cross-Origin-Resource-Policy is left out: it would block other sites' no-cors reads
 * and adds nothing to CORS-mode fetches of the JSON API.
 *
 * Why not `app.use(secureHeaders(…))` itself: it sets its eleven headers one `Headers.set` at a time
 * on every answer after the handler ran, which was about 6% of a denied publish's CPU in a profile
 * (`npm run bench:profile -- --scenario deny`). A flood answer built by {@link securedJson} instead
 * copies them from one prepared `Headers` in a single call, and the middleware leaves it alone.
 * The headers and values are still exactly Hono's: they are read from its middleware once, on a probe.
 */
import { createMiddleware } from "hono/factory";
import { secureHeaders } from "hono/secure-headers";

const honoSecureHeaders = secureHeaders({
  contentSecurityPolicy: { defaultSrc: ["'none'"], frameAncestors: ["'none'"] },
  xFrameOptions: "DENY",
  // A year, the same as public/_headers gives the dashboard: a browser that once reached this
  // origin over HTTPS never sends a token or the admin bearer to it in clear text.
  strictTransportSecurity: "max-age=31536000; includeSubDomains",
  crossOriginResourcePolicy: false,
});

/** The header Hono's middleware removes from every answer (it would name the server's stack). */
const REMOVED = "X-Powered-By";

/** What Hono's middleware sets with the options above: it runs once on a probe that records them. */
async function probeHeaders(): Promise<[string, string][]> {
  const pairs: [string, string][] = [];
  const headers = {
    has: () => false,
    set: (name: string, value: string) => void pairs.push([name, value]),
    delete: () => {},
  };
  const probe = { res: { headers }, get: () => undefined, set: () => {} };
  await honoSecureHeaders(probe as unknown as Parameters<typeof honoSecureHeaders>[0], async () => {});
  return pairs;
}

/** The headers, once read (the first requests read them); null until then. */
let pairs: [string, string][] | null = null;
/** The headers of a JSON answer: the security headers and its content type. */
let jsonTemplate: Headers | null = null;

/** Answers built with the headers already in them: the middleware does not set them again. */
const secured = new WeakSet<Response>();

/**
 * The middleware: every answer gets the headers, except one {@link securedJson} built (it has them).
 * An answer whose headers cannot be changed (a proxied one) fails the same way Hono's would.
 */
export const securityHeaders = createMiddleware(async (c, next) => {
  if (!pairs) {
    // Each request reads them itself until one has: a promise shared with another request would
    // resume this one in that request's context (see docs/benchmarks.md, "Where the time goes").
    const read = await probeHeaders();
    pairs ??= read;
    jsonTemplate ??= new Headers([...read, ["content-type", "application/json"]]);
  }
  await next();
  if (secured.has(c.res)) return;
  const headers = c.res.headers;
  for (const [name, value] of pairs as [string, string][]) headers.set(name, value);
  headers.delete(REMOVED);
});

/**
 * A JSON answer that already carries the security headers, plus `headers`: one copy of the prepared
 * headers instead of eleven calls. Before the middleware has read them (never on a request's path)
 * it is a plain answer, and the middleware adds them as to any other.
 */
export function securedJson(body: unknown, status: number, headers: Record<string, string>): Response {
  // The Response copies the prepared headers (content type included) once; the few of this answer
  // are set on its own. Copying the template first and the copy into the Response cost twice.
  const res = new Response(JSON.stringify(body), { status, headers: jsonTemplate ?? JSON_ONLY });
  for (const name in headers) res.headers.set(name, headers[name] as string);
  if (jsonTemplate) secured.add(res);
  return res;
}

const JSON_ONLY = { "content-type": "application/json" };
