#!/usr/bin/env node
// `npm run deploy` runs this first (predeploy). It parses wrangler.toml's [vars] with the same code
// the Worker uses and refuses to deploy a configuration the Worker would reject, or a placeholder
// KV namespace id (`--vars-only` skips that). Exit 1 with the variable named; exit 0 when the config is deployable.
import { dirname, join } from "node:path";
import { fileURLToPath } from "node:url";
import { unstable_readConfig } from "wrangler";
import { importSource } from "./import-source.mjs";

const root = join(dirname(fileURLToPath(import.meta.url)), "..");
const env = process.argv.find((a) => a.startsWith("--env="))?.slice(6);
// --vars-only: check the variables but not the KV id (CI checks a clone that was never provisioned).
const varsOnly = process.argv.includes("--vars-only");
const config = unstable_readConfig({ config: join(root, "wrangler.toml"), env }, { hideWarnings: true });

// The Worker's own parser, bundled on the fly so this check can never drift from it.
const mod = await importSource(`export { parseConfig, rawConfigFrom } from "./src/config";`);

const problems = [];
try {
  mod.parseConfig(mod.rawConfigFrom(config.vars ?? {}));
} catch (e) {
  problems.push(e.message);
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
