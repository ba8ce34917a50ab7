// The Worker started the way `npm start` starts it (scripts/start.mjs: wrangler dev with local KV and
// Durable Objects), for scripts that drive it from outside: the docs and OpenAPI checks, the browser
// test and the fast loop's end-to-end run. Fresh local storage every time, so what a script shows
// does not depend on an earlier run. (scripts/lib/workerd.mjs starts a Worker in bare workerd
// instead, for measurements and checks that must not go through wrangler dev's proxy.)
import { spawn } from "node:child_process";
import { mkdtempSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { devAdminToken } from "./admin-token.mjs";
import { root } from "./root.mjs";

/**
 * Starts `npm start` on 127.0.0.1:`port` with `args` for wrangler dev and `env` added to the
 * environment (e.g. `SAMPLER_LOCAL_PERIOD`). `ready()` resolves once `/healthz` answers 200 (it
 * throws with the server's last lines after `timeoutMs`); `stop()` ends the server and its children,
 * and runs by itself when this process exits. A server that stops (bad configuration) fails `ready()` at
 * once with its output. `admin` is the admin bearer it runs with (.dev.vars's,
 * which `npm start` creates from .dev.vars.example when missing).
 */
export function startDev({ port, args = [], env = {} }) {
  const server = spawn(
    process.execPath,
    [
      join(root, "scripts/start.mjs"),
      "--port",
      String(port),
      "--ip",
      "127.0.0.1",
      "--persist-to",
      mkdtempSync(join(tmpdir(), "floodgate-dev-")),
      ...args,
    ],
    {
      cwd: root,
      // wrangler needs the Node 22 of node_modules/.bin, which npm scripts put first on PATH.
      env: { ...process.env, PATH: `${join(root, "node_modules", ".bin")}:${process.env.PATH}`, ...env },
      stdio: ["ignore", "pipe", "pipe"],
      detached: true,
    },
  );
  let log = "";
  /** Set when `npm start` ended (bad configuration stops it at once): `ready()` then fails at once too. */
  let exited = null;
  server.on("exit", (code, signal) => {
    exited = { code, signal };
  });
  server.stdout.on("data", (d) => (log += d));
  server.stderr.on("data", (d) => (log += d));
  const stop = () => {
    try {
      process.kill(-server.pid, "SIGTERM");
    } catch {}
  };
  process.on("exit", stop);
  const base = `http://127.0.0.1:${port}`;
  const ready = async (timeoutMs = 90_000) => {
    const end = Date.now() + timeoutMs;
    for (;;) {
      try {
        if ((await fetch(`${base}/healthz`)).ok) return;
      } catch {}
      if (exited) {
        throw new Error(
          `npm start exited (${exited.code ?? exited.signal}) before the Worker answered:\n${log.split("\n").slice(-30).join("\n")}`,
        );
      }
      if (Date.now() > end) {
        throw new Error(
          `the Worker did not start within ${timeoutMs / 1000} s:\n${log.split("\n").slice(-30).join("\n")}`,
        );
      }
      await new Promise((r) => setTimeout(r, 300));
    }
  };
  return { base, admin: devAdminToken(), ready, stop, log: () => log };
}
