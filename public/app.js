// @ts-check
// Floodgate dashboard: polls GET /v1/admin/overview (docs/api.md, Operator routes) and charts each busy
// channel. No build step: plain browser JavaScript in ES modules (this one is the page's entry),
// typechecked by public/tsconfig.json (npm run typecheck); uPlot is copied into /vendor by
// scripts/build-assets.mjs and loaded before this as a classic script (the global `uPlot`).
//
// The modules, each with its own idea: session.js (log in and out) → polling.js (the poll loop, the
// toolbar) → overview.js (one poll's answer: totals, cards) → cards.js (a channel's card) →
// rates-chart.js, occupancy-chart.js, audience.js, drop-summary.js; underneath them all api.js,
// dom.js, format.js, and types.js (the types, for the typechecker only).

import { boot } from "./session.js";

boot();
