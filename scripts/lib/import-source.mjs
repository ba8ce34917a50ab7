// Imports the project's own TypeScript modules into a Node script, bundled on the fly with esbuild,
// so scripts run exactly the shipped code (the sampler's law, the rate grammar) without a build step.
import { build } from "esbuild";
import { root } from "./root.mjs";

/**
 * Bundles `source` (a TypeScript module whose relative imports resolve from the project root, e.g.
 * `export { parseDuration } from "./src/settings/durations"`) and imports the result.
 */
export async function importSource(source) {
  const out = await build({
    stdin: { contents: source, resolveDir: root, loader: "ts" },
    bundle: true,
    write: false,
    format: "esm",
    platform: "neutral",
  });
  return import(`data:text/javascript;base64,${Buffer.from(out.outputFiles[0].text).toString("base64")}`);
}
