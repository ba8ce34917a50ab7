#!/usr/bin/env node
// `npm run deploy` runs this first (predeploy). It parses wrangler.toml's [vars] with the same code
// the Worker uses and refuses to deploy a configuration the Worker would reject, or a placeholder
// KV namespace id (`--vars-only` skips that). Exit 1 with the variable named; exit 0 when the config is deployable.
// Secrets: it refuses a weak TOKEN_SECRET, ADMIN_TOKEN or PUSHER_APP_SECRET (docs/operations.md, "Secrets") wherever it
// can see one: in [vars] (where a secret never belongs), in the process environment, or in the file
// given with `--secrets-file=PATH` (JSON or .env, the same file `wrangler deploy --secrets-file` takes).
// Secrets set with `wrangler secret put` are out of its sight; /healthz answers 500 for a weak one.
// It also refuses the example secrets the repository shows (.dev.vars.example, the README and docs,
// the test configuration): anyone can read those.
import { readdirSync, readFileSync } from "node:fs";
import { join } from "node:path";
import { unstable_readConfig } from "wrangler";
import { importSource } from "./lib/import-source.mjs";
import { options } from "./lib/options.mjs";
import { root } from "./lib/root.mjs";

// --env NAME: a wrangler environment; --vars-only: check the variables but not the KV id (CI checks a
// clone that was never provisioned); --secrets-file PATH: see above. An unknown option is an error.
const opts = options("check:config", { env: null, "vars-only": false, "secrets-file": null });
const env = opts.env ?? undefined;
const varsOnly = opts["vars-only"];
const config = unstable_readConfig({ config: join(root, "wrangler.toml"), env }, { hideWarnings: true });

// The Worker's own parser, bundled on the fly so this check can never drift from it.
const mod = await importSource(
  `export { parseConfig, rawConfigFrom } from "./src/settings/settings"; export { SECRET_MIN, exampleSecrets, secretProblem } from "./src/settings/secrets";`,
);

/** The secret values shown in the repository's own files (src/settings/secrets.ts, `exampleSecrets`). */
const shownSecrets = mod.exampleSecrets(
  [
    ".dev.vars.example",
    "README.md",
    "test/vitest.config.ts",
    ...readdirSync(join(root, "docs"))
      .filter((f) => f.endsWith(".md"))
      .map((f) => `docs/${f}`),
  ].map((f) => readFileSync(join(root, f), "utf8")),
);

/** KEY=VALUE lines (quotes optional, # comments) or a JSON object. */
function readSecretsFile(path) {
  const text = readFileSync(path, "utf8");
  if (text.trim().startsWith("{")) return JSON.parse(text);
  const out = {};
  for (const line of text.split(/\r?\n/)) {
    const m = /^\s*(?:export\s+)?([A-Za-z_][A-Za-z0-9_]*)\s*=\s*(.*?)\s*$/.exec(line);
    if (m && !line.trim().startsWith("#")) out[m[1]] = m[2].replace(/^(["'])(.*)\1$/, "$2");
  }
  return out;
}

const problems = [];
const secretsFile = opts["secrets-file"];
const secretSources = [
  ["wrangler.toml [vars]", config.vars ?? {}],
  ["the environment", process.env],
  ...(secretsFile ? [[secretsFile, readSecretsFile(secretsFile)]] : []),
];
try {
  const raw = mod.rawConfigFrom(config.vars ?? {});
  // The Pusher door is open when its id, key and secret are all set. A secret set with `wrangler
  // secret put` is out of sight here: with the id and key set, one that is not seen counts as set
  // (the Worker still answers 500 naming it if it is missing).
  const seen = secretSources.map(([, values]) => values.PUSHER_APP_SECRET).find((v) => v !== undefined);
  if (seen !== undefined) raw.PUSHER_APP_SECRET = seen;
  else if (raw.PUSHER_APP_ID && raw.PUSHER_APP_KEY) raw.PUSHER_APP_SECRET = "set-with-wrangler-secret-put";
  mod.parseConfig(raw);
} catch (e) {
  problems.push(e.message);
}
for (const name of Object.keys(mod.SECRET_MIN)) {
  if (name in (config.vars ?? {}))
    problems.push(`${name} is a secret: set it with \`wrangler secret put ${name}\`, not in [vars]`);
  for (const [where, values] of secretSources) {
    if (values[name] === undefined) continue;
    const problem = mod.secretProblem(name, values[name]);
    if (problem) problems.push(`${problem} (in ${where})`);
    else if (shownSecrets.has(values[name]))
      problems.push(`${name} is an example value shown in this repository (in ${where}): set a secret of your own`);
  }
}
for (const ns of varsOnly ? [] : (config.kv_namespaces ?? [])) {
  if (!ns.id || /^0+$/.test(ns.id)) {
    problems.push(
      `KV namespace ${ns.binding} has the placeholder id; run \`npx wrangler kv namespace create ${ns.binding}\` and put its id in wrangler.toml`,
    );
  }
}
if (problems.length) {
  for (const p of problems) console.error(`floodgate: refusing to deploy: ${p}`);
  process.exit(1);
}
console.log("floodgate: configuration OK");
