/**
 * MetricsStore — the one Durable Object that holds the deployment's totals for `/metrics`
 * (docs/operations.md, Metrics). Each isolate counts into its own buffer
 * (./metrics-buffer.ts) and flushes it here at most about once a second; `/metrics` flushes
 * its own isolate's buffer before reading, so a scrape sees every decision made before it in a
 * single-isolate local run. Counts are exact once every isolate has flushed. Its one table, `series`,
 * holds a total per series key (./series.ts).
 */
import { DurableObject } from "cloudflare:workers";

/** The one object that holds the deployment's totals. */
export class MetricsStore extends DurableObject<Env> {
  constructor(ctx: DurableObjectState, env: Env) {
    super(ctx, env);
    ctx.storage.sql.exec("CREATE TABLE IF NOT EXISTS series (key TEXT PRIMARY KEY, value INTEGER NOT NULL)");
  }

  add(deltas: Record<string, number>): void {
    const sql = this.ctx.storage.sql;
    for (const [k, d] of Object.entries(deltas)) {
      sql.exec(
        "INSERT INTO series (key, value) VALUES (?, ?) ON CONFLICT(key) DO UPDATE SET value = value + excluded.value",
        k,
        d,
      );
    }
  }

  read(): Record<string, number> {
    const out: Record<string, number> = {};
    for (const r of this.ctx.storage.sql.exec<{ key: string; value: number }>("SELECT key, value FROM series")) {
      out[r.key] = r.value;
    }
    return out;
  }
}
