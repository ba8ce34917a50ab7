// Bad configuration stops `npm start` (docs/operations.md, "Local development"): the variables
// `wrangler dev` would give the Worker — wrangler.toml's [vars] (of `--env NAME`), then .dev.vars,
// then each `--var NAME:VALUE` — checked by the Worker's own parser,
// bundled on the fly so this check can never drift from it. Without it the server said Ready and the
// local sampler retried against a Worker that refused every request, twice a second, forever.
import { existsSync, readFileSync } from "node:fs";
import { join } from "node:path";
import { importSource } from "./import-source.mjs";
import { root } from "./root.mjs";

/** `NAME=value` lines (quotes optional, # comments), as wrangler reads .dev.vars. */
export function readDevVars(file = join(root, ".dev.vars")) {
  const out = {};
  if (!existsSync(file)) return out;
  for (const line of readFileSync(file, "utf8").split(/\r?\n/)) {
    if (line.trim().startsWith("#")) continue;
    const m = /^\s*(?:export\s+)?([A-Za-z_][A-Za-z0-9_]*)\s*=\s*(.*?)\s*$/.exec(line);
    if (m) out[m[1]] = m[2].replace(/^(["'])(.*)\1$/, "$2");
  }
  return out;
}

/**
 * The `--var NAME:VALUE` pairs and the `--env` of wrangler dev's arguments (`--var A:1 B:2`,
 * `--var=A:1` and repeated `--var` all count, as wrangler reads them).
 */
export function varsFromArgs(args) {
  const vars = {};
  let env;
  for (let i = 0; i < args.length; i++) {
    const a = args[i];
    if (a === "--env" || a === "-e") env = args[++i];
    else if (a.startsWith("--env=")) env = a.slice(6);
    else if (a === "--var" || a.startsWith("--var=")) {
      const values = a === "--var" ? [] : [a.slice(6)];
      if (a === "--var") while (i + 1 < args.length && !args[i + 1].startsWith("-")) values.push(args[++i]);
      for (const v of values) {
        const at = v.indexOf(":");
        if (at > 0) vars[v.slice(0, at)] = v.slice(at + 1);
      }
    }
  }
  return { vars, env };
}

/**
 * wrangler.toml's `[vars]` (or `[env.NAME.vars]`): one-line `NAME = "value"` entries, which is all
 * this repository's file holds. Importing wrangler's own reader costs over 2 s of CPU, most of the
 * 5 s a bad configuration may take to stop `npm start`; an entry this reader cannot read makes it
 * answer null, and the Worker's /healthz (scripts/start.mjs) then catches a bad value instead.
 */
export function tomlVars(text, env) {
  const section = env ? `[env.${env}.vars]` : "[vars]";
  const vars = {};
  let inside = false;
  for (const raw of text.split(/\r?\n/)) {
    const line = raw.trim();
    if (!line || line.startsWith("#")) continue;
    if (line.startsWith("[")) {
      inside = line === section;
      continue;
    }
    if (!inside) continue;
    const m = /^([A-Za-z_][A-Za-z0-9_]*)\s*=\s*(.*?)\s*(#.*)?$/.exec(line);
    if (!m) return null;
    const value = m[2];
    const basic = /^"((?:[^"\\]|\\.)*)"$/.exec(value);
    const literal = /^'([^']*)'$/.exec(value);
    if (basic) vars[m[1]] = JSON.parse(`"${basic[1]}"`);
    else if (literal) vars[m[1]] = literal[1];
    else if (/^(-?\d+(\.\d+)?|true|false)$/.test(value)) vars[m[1]] = value;
    else return null; // a multi-line string, a table or an array: not this reader's to guess
  }
  return vars;
}

/** The variables wrangler dev gives the Worker for `args`, or null when wrangler.toml is beyond {@link tomlVars}. */
export function devVars(args) {
  const { vars, env } = varsFromArgs(args);
  const fromToml = tomlVars(readFileSync(join(root, "wrangler.toml"), "utf8"), env);
  if (fromToml === null) return null;
  return { ...fromToml, ...readDevVars(join(root, ".dev.vars")), ...vars };
}

/** The Worker's own settings module, bundled once. */
let settingsModule = null;
function settingsSource() {
  settingsModule ??= importSource(
    `export { parseConfig, rawConfigFrom, CONFIG_VARIABLES } from "./src/settings/settings"; export { SECRET_MIN } from "./src/settings/secrets";`,
  );
  return settingsModule;
}

/**
 * The Worker's verdict on `vars`: `{ problem }` (its one message, `invalid configuration: NAME: …`),
 * or `{ settings }` parsed as the Worker parses them; `{}` when `vars` is null (wrangler.toml beyond
 * this reader: the Worker's /healthz decides then).
 */
export async function checkConfig(vars) {
  if (vars === null) return {};
  const mod = await settingsSource();
  try {
    return { settings: mod.parseConfig(mod.rawConfigFrom(vars)) };
  } catch (e) {
    if (e?.name === "ConfigError") return { problem: e.message };
    throw e;
  }
}

/** Every variable and secret name the Worker reads. */
export async function knownVariables() {
  const mod = await settingsSource();
  return new Set([...mod.CONFIG_VARIABLES, ...Object.keys(mod.SECRET_MIN)]);
}
