// The command-line options of the benchmark scripts, read with node:util's parseArgs (as load.mjs
// does). Kept apart from bench-lib.mjs so that scripts which start no Worker (bench-loop.mjs,
// e2e-fast-loop.mjs) do not load Miniflare and wrangler just to read their flags.
import { parseArgs } from "node:util";

/**
 * `--name value` options, each with its default: a number default makes the option a number (a value
 * that is not one stops the script with a usage error), a string default a string, and `null` an
 * optional string. `-h`/`--help` prints the options with their defaults; an unknown option is a usage
 * error rather than being ignored.
 *
 *   const { seconds, only } = options("bench", { seconds: 2, only: "" });
 */
export function options(script, defaults) {
  const usage = () =>
    `usage: npm run ${script} -- ${Object.entries(defaults)
      .map(([k, d]) => `[--${k} ${d === null || d === "" ? "…" : d}]`)
      .join(" ")}`;
  let values;
  try {
    values = parseArgs({
      options: {
        ...Object.fromEntries(Object.keys(defaults).map((k) => [k, { type: "string" }])),
        help: { type: "boolean", short: "h" },
      },
    }).values;
  } catch (e) {
    console.error(`floodgate ${script}: ${e.message}\n${usage()}`);
    process.exit(2);
  }
  if (values.help) {
    console.log(usage());
    process.exit(0);
  }
  const out = {};
  for (const [k, d] of Object.entries(defaults)) {
    const v = values[k];
    if (v === undefined) out[k] = d;
    else if (typeof d === "number") {
      out[k] = Number(v);
      if (v.trim() === "" || !Number.isFinite(out[k])) {
        console.error(`floodgate ${script}: --${k} must be a number, not "${v}"\n${usage()}`);
        process.exit(2);
      }
    } else out[k] = v;
  }
  return out;
}
