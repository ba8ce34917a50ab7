// Where a script finds the admin bearer of a Worker it did not start with its own secrets: the one
// place every script asks, so the development value lives only in .dev.vars.example.
import { existsSync, readFileSync } from "node:fs";
import { join } from "node:path";
import { root } from "./root.mjs";

/**
 * The ADMIN_TOKEN that `npm start` runs with: the one in .dev.vars, else the one in
 * .dev.vars.example (which `npm start` copies to .dev.vars when that file is missing).
 */
export function devAdminToken() {
  for (const file of [".dev.vars", ".dev.vars.example"]) {
    const token = readVar(join(root, file), "ADMIN_TOKEN");
    if (token) return token;
  }
  throw new Error("no ADMIN_TOKEN in .dev.vars or .dev.vars.example");
}

/**
 * The admin bearer for a server someone else started (`npm run load`): $FLOODGATE_ADMIN_TOKEN when
 * set (a deployment's token), else the development one of {@link devAdminToken}.
 */
export function adminToken() {
  return process.env.FLOODGATE_ADMIN_TOKEN || devAdminToken();
}

/** One `NAME=value` line of a .dev.vars file (quotes optional, # comments), or undefined. */
function readVar(file, name) {
  if (!existsSync(file)) return undefined;
  for (const line of readFileSync(file, "utf8").split(/\r?\n/)) {
    const m = /^\s*(?:export\s+)?([A-Za-z_][A-Za-z0-9_]*)\s*=\s*(.*?)\s*$/.exec(line);
    if (m && m[1] === name) return m[2].replace(/^(["'])(.*)\1$/, "$2");
  }
  return undefined;
}
