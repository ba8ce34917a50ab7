#!/usr/bin/env node
// Copies the dashboard's one dependency (uPlot, from node_modules) into public/vendor/, so the page
// works without a CDN. Run by `npm install` (postinstall), `npm start`, and before deploys; idempotent.
import { copyFileSync, mkdirSync } from "node:fs";
import { createRequire } from "node:module";
import { dirname, join } from "node:path";
import { fileURLToPath } from "node:url";

const root = join(dirname(fileURLToPath(import.meta.url)), "..");
const require = createRequire(import.meta.url);
const dist = dirname(require.resolve("uplot/dist/uPlot.iife.min.js"));
const out = join(root, "public", "vendor");
mkdirSync(out, { recursive: true });
for (const f of ["uPlot.iife.min.js", "uPlot.min.css"]) copyFileSync(join(dist, f), join(out, f));
