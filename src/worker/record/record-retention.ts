/**
 * The record's retention, a step of the Cron sweep (src/index.ts): deletes the objects of every hour
 * wholly past `RECORD_RETENTION`, oldest first (keys sort by hour), at most {@link RETENTION_PER_RUN}
 * per run so a backlog is worked off over several runs inside one invocation's limits. Their copies
 * are counted from each object's metadata in `floodgate_record_expired_total`. The equivalent R2
 * lifecycle rule is in docs/operations.md.
 */
import { HOUR_MS, hourOfKey } from "../../../functions/record-batch";
import type { Services } from "../services";
import { copiesIn } from "./record-objects";

/** Most objects one run deletes: one `delete` call takes at most 1,000 keys. */
export const RETENTION_PER_RUN = 1000;

/** Deletes expired objects; answers how many objects and copies it deleted. */
export async function sweepRecord(
  env: Env,
  svc: Services,
  now: number,
  max = RETENTION_PER_RUN,
): Promise<{ deleted: number; copies: number }> {
  const cutoff = now - svc.config.recordRetentionMs;
  const keys: string[] = [];
  let copies = 0;
  let cursor: string | undefined;
  scan: do {
    const page = await env.RECORD_BUCKET.list({
      prefix: "drops/",
      cursor,
      limit: Math.min(1000, max - keys.length),
      include: ["customMetadata"],
    });
    for (const obj of page.objects) {
      const hour = hourOfKey(obj.key);
      if (hour === null) continue; // not the record's: never deleted here
      if (hour + HOUR_MS > cutoff) break scan; // this hour and every later one still hold kept copies
      keys.push(obj.key);
      copies += copiesIn(obj);
      if (keys.length >= max) break scan;
    }
    cursor = page.truncated ? page.cursor : undefined;
  } while (cursor);
  if (keys.length > 0) {
    await env.RECORD_BUCKET.delete(keys);
    svc.metrics.inc("floodgate_record_expired_total", {}, copies);
    await svc.metrics.flushNow();
  }
  return { deleted: keys.length, copies };
}
