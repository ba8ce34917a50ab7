// One `npm start` per local state (docs/operations.md, "Local development"): a second server on the
// same `.wrangler/state` shares its SQLite files (SQLITE_BUSY on another port) or, on the same port,
// says "local sampler runs" while it talks to the first. The first holds a lock file naming its pid
// and port; a lock whose process is gone is taken over.
import { mkdirSync, readFileSync, rmSync, writeFileSync } from "node:fs";
import { join } from "node:path";

const LOCK = "floodgate-start.lock";

/** Whether process `pid` is alive. */
function alive(pid) {
  try {
    process.kill(pid, 0);
    return true;
  } catch (e) {
    return e?.code === "EPERM";
  }
}

/**
 * Takes the lock of `stateDir` for this process serving `port`: `{ held: true, release }`, or
 * `{ held: false, reason }` naming the server that holds it and what to do.
 */
export function holdStateLock(stateDir, port) {
  mkdirSync(stateDir, { recursive: true });
  const file = join(stateDir, LOCK);
  let holder = null;
  try {
    holder = JSON.parse(readFileSync(file, "utf8"));
  } catch {
    // no lock, or an unreadable one: take it
  }
  if (holder && holder.pid !== process.pid && alive(holder.pid)) {
    return {
      held: false,
      reason:
        `another npm start (pid ${holder.pid}, http://localhost:${holder.port}) is serving this checkout's local state ` +
        `(${stateDir}). Stop it first, or give this one its own state: npm start -- --port ${port === holder.port ? port + 1 : port} --persist-to <another directory>`,
    };
  }
  writeFileSync(file, JSON.stringify({ pid: process.pid, port }));
  let released = false;
  const release = () => {
    if (released) return;
    released = true;
    try {
      if (JSON.parse(readFileSync(file, "utf8")).pid === process.pid) rmSync(file);
    } catch {}
  };
  process.on("exit", release);
  return { held: true, release };
}
