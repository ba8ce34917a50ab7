// What `npm start` says before it serves (docs/operations.md, "Local development"): the settings in
// force as the Worker's own parser reads them (wrangler prints every --var as "(hidden)", so nobody
// could see a target take effect), and a warning for each variable name Floodgate does not know,
// naming the nearest one it does (`THROTTLE_TARGTE` → `THROTTLE_TARGET`).

/** Edit distance between two names (insertions, deletions, substitutions, adjacent swaps). */
function distance(a, b) {
  const d = Array.from({ length: a.length + 1 }, (_, i) => [i, ...Array(b.length).fill(0)]);
  for (let j = 1; j <= b.length; j++) d[0][j] = j;
  for (let i = 1; i <= a.length; i++) {
    for (let j = 1; j <= b.length; j++) {
      const cost = a[i - 1] === b[j - 1] ? 0 : 1;
      d[i][j] = Math.min(d[i - 1][j] + 1, d[i][j - 1] + 1, d[i - 1][j - 1] + cost);
      if (i > 1 && j > 1 && a[i - 1] === b[j - 2] && a[i - 2] === b[j - 1])
        d[i][j] = Math.min(d[i][j], d[i - 2][j - 2] + 1);
    }
  }
  return d[a.length][b.length];
}

/** The known name nearest `name`, or null when none is near enough to be what was meant. */
export function nearest(name, known) {
  let best = null;
  let bestD = Number.POSITIVE_INFINITY;
  for (const k of known) {
    const dist = distance(name.toUpperCase(), k);
    if (dist < bestD) {
      best = k;
      bestD = dist;
    }
  }
  return bestD <= Math.max(2, Math.floor(name.length / 4)) ? best : null;
}

/** One warning line per name in `given` (with where it came from) that is not in `known`. */
export function unknownVarWarnings(given, known) {
  const lines = [];
  for (const [name, where] of given) {
    if (known.has(name)) continue;
    const near = nearest(name, known);
    lines.push(
      `floodgate: warning: ${where} sets ${name}, which Floodgate does not read${near ? ` — did you mean ${near}?` : ""}`,
    );
  }
  return lines;
}

/** `{rate, per, burst}` as `50/s (burst 100)`; a disabled budget as `off`. */
function budgetText(limit) {
  if (!limit) return "off";
  const per =
    limit.perMs % 3_600_000 === 0
      ? `${limit.perMs / 3_600_000}h`
      : limit.perMs % 60_000 === 0
        ? `${limit.perMs / 60_000}m`
        : `${limit.perMs / 1000}s`;
  const window = per === "1s" ? "s" : per === "1m" ? "m" : per === "1h" ? "h" : per;
  return `${limit.rate}/${window} (burst ${limit.burst})`;
}

/** A target as written (`20/s`, `{deliveries: 5000/s}`). */
function targetText(t) {
  if (!t) return "none";
  return t.kind === "messages" ? t.source : `deliveries ${t.source}`;
}

/** Rules `pattern → value`, or `none`. */
function rulesText(rules, value) {
  return rules.length ? rules.map((r) => `${r.pattern.source} → ${value(r.value)}`).join(", ") : "none";
}

/** The settings in force, a few lines, from the Worker's parsed settings (src/settings/settings.ts). */
export function settingsReport(s, extra = []) {
  const origins = [...s.cors.origins, ...(s.cors.anyForPublicReads ? ["* (public reads)"] : [])];
  return [
    "floodgate: settings in force (wrangler.toml [vars], .dev.vars, --var):",
    `  budgets    publish ${budgetText(s.publish)} · subscribe ${budgetText(s.subscribe)} · read ${budgetText(s.read)} · token issue ${budgetText(s.tokenIssue)}`,
    `  throttle   target ${targetText(s.throttleTarget)} · targets ${rulesText(s.throttleTargets, targetText)} · fallback drop rate ${s.throttleFallbackRate}${s.throttleThinning.length ? ` · thinning ${s.throttleThinning.map((p) => p.source).join(", ")}` : ""}`,
    `  channels   summaries ${rulesText(s.throttleSummary, (r) => r.pointer)} · shards ${rulesText(s.audienceShards, (r) => `by ${r.by}`)} · presence announced up to ${s.presenceAnnounceMax}`,
    `  browsers   CORS origins ${origins.length ? origins.join(", ") : "none (same origin only)"}`,
    ...extra,
  ];
}
