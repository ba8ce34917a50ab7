// The command-line options of every script that takes them, read with node:util's parseArgs. Kept
// apart from the Worker starters so that scripts which start no Worker (bench-loop.mjs,
// check-config.mjs) do not load Miniflare just to read their flags.
import { parseArgs } from "node:util";

/**
 * `--name value` options, each with its default: a number default makes the option a number (a value
 * that is not one stops the script with a usage error), a string default a string, `null` an
 * optional string and `false` a flag. `-h`/`--help` prints `help` (default: the options with their
 * defaults); an unknown option, or a positional argument unless `positionals` is set, is a usage
 * error (exit 2) rather than being ignored. With `positionals`, they come back as `positionals`.
 *
 *   const { seconds, only } = options("bench", { seconds: 2, only: "" });
 */
export function options(script, defaults, { help, positionals = false } = {}) {
  const usage = () =>
    help ??
    `usage: npm run ${script}${Object.keys(defaults).length || positionals ? " --" : " (no options)"}${Object.entries(
      defaults,
    )
      .map(([k, d]) => (d === false ? ` [--${k}]` : ` [--${k} ${d === null || d === "" ? "…" : d}]`))
      .join("")}${positionals ? " [arguments…]" : ""}`;
  let parsed;
  try {
    parsed = parseArgs({
      allowPositionals: positionals,
      options: {
        ...Object.fromEntries(
          Object.entries(defaults).map(([k, d]) => [k, { type: d === false ? "boolean" : "string" }]),
        ),
        help: { type: "boolean", short: "h" },
      },
    });
  } catch (e) {
    console.error(`floodgate ${script}: ${e.message}\n\n${usage()}`);
    process.exit(2);
  }
  const { values } = parsed;
  if (values.help) {
    console.log(usage());
    process.exit(0);
  }
  const out = positionals ? { positionals: parsed.positionals } : {};
  for (const [k, d] of Object.entries(defaults)) {
    const v = values[k];
    if (v === undefined) out[k] = d;
    else if (typeof d === "number") {
      out[k] = Number(v);
      if (v.trim() === "" || !Number.isFinite(out[k])) {
        console.error(`floodgate ${script}: --${k} must be a number, not "${v}"\n\n${usage()}`);
        process.exit(2);
      }
    } else out[k] = v;
  }
  return out;
}
