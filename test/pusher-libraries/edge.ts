/**
 * A stand-in for what sits between a browser and the Worker, for the library tests whose clients run
 * in Node: pusher-js there cannot set a header a browser or Cloudflare's edge would (the client's
 * address in `CF-Connecting-IP`, which only the edge sets; the page's `Origin`, which only a browser
 * sends). Each WebSocket upgrade is passed on to the Worker with headers its path names
 * (pusher-js's `wsPath`), the same headers it came with removed.
 */
import { createServer, type Server } from "node:http";
import { connect } from "node:net";

/** What one upgrade's path names: the path the Worker is asked for, and the headers set on it. */
export type EdgeRoute = (path: string) => { path: string; headers: Record<string, string> } | null;

/** The edge in front of `target`, listening on a port of its own; `stop` closes it. */
export async function edgeInFrontOf(target: URL, route: EdgeRoute): Promise<{ port: number; stop(): void }> {
  const server: Server = createServer((_req, res) => res.writeHead(404).end());
  server.on("upgrade", (req, socket, head) => {
    const to = route(req.url ?? "");
    if (!to) return socket.destroy();
    const replaced = new Set(Object.keys(to.headers).map((h) => h.toLowerCase()));
    const upstream = connect(Number(target.port), target.hostname, () => {
      const lines = [`GET ${to.path} HTTP/1.1`];
      for (let i = 0; i < req.rawHeaders.length; i += 2) {
        if (!replaced.has(req.rawHeaders[i]?.toLowerCase() ?? "")) {
          lines.push(`${req.rawHeaders[i]}: ${req.rawHeaders[i + 1]}`);
        }
      }
      for (const [name, value] of Object.entries(to.headers)) lines.push(`${name}: ${value}`);
      upstream.write(`${lines.join("\r\n")}\r\n\r\n`);
      upstream.write(head);
      socket.pipe(upstream).pipe(socket);
    });
    upstream.on("error", () => socket.destroy());
    socket.on("error", () => upstream.destroy());
  });
  await new Promise<void>((resolve) => server.listen(0, "127.0.0.1", resolve));
  return { port: (server.address() as { port: number }).port, stop: () => server.close() };
}

/**
 * The route of a test whose connections each name one header in their path: `/<prefix>/<value>/…` is
 * `…` asked with `header: <value>` (URI-decoded); any other path is refused.
 */
export function headerInPath(prefix: string, header: string): EdgeRoute {
  const pattern = new RegExp(`^/${prefix}/([^/]+)(/.*)$`);
  return (path) => {
    const m = pattern.exec(path);
    return m ? { path: m[2] as string, headers: { [header]: decodeURIComponent(m[1] as string) } } : null;
  };
}
