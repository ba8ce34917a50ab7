#!/usr/bin/env node
// Copies the pages' dependencies from node_modules into public/vendor/, so they work without a CDN:
// uPlot for the dashboard, Swagger UI for the API reference page (/docs/api). Run by `npm install`
// (postinstall), `npm start`, and before deploys; idempotent.
import { copyFileSync, mkdirSync } from "node:fs";
import { createRequire } from "node:module";
import { dirname, join } from "node:path";
import { fileURLToPath } from "node:url";

const root = join(dirname(fileURLToPath(import.meta.url)), "..");
const require = createRequire(import.meta.url);
const vendor = join(root, "public", "vendor");

/** Copies `files` from the folder holding `anchor` (a file of an installed package) to public/vendor/`to`. */
function copy(anchor, files, to = "") {
  const from = dirname(require.resolve(anchor));
  const out = join(vendor, to);
  mkdirSync(out, { recursive: true });
  for (const f of files) copyFileSync(join(from, f), join(out, f));
}

copy("uplot/dist/uPlot.iife.min.js", ["uPlot.iife.min.js", "uPlot.min.css"]);
copy("swagger-ui-dist/swagger-ui-bundle.js", ["swagger-ui-bundle.js", "swagger-ui.css"], "swagger-ui");
