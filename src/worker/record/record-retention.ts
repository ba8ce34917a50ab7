/**
 * The record's retention, a step of the Cron sweep (src/index.ts): deletes the objects of every hour
 * wholly past `RECORD_RETENTION`, oldest first (keys sort by hour), in as many `delete` calls of up
 * to {@link DELETE_KEYS_PER_CALL} keys as it takes, at most {@link RETENTION_CALLS_PER_RUN} per run:
 * far more than the record writes in a minute (an object per consumer invocation and hour), so the
 * record never outgrows its retention, and inside one invocation's subrequest limit. Their copies are
 * counted from each object's metadata in `floodgate_record_expired_total`. The equivalent R2
 * lifecycle rule is in docs/operations.md.
 */
import { HOUR_MS, hourOfKey } from "../../../functions/record-batch";
import type { Services } from "../services";
import { copiesIn } from "./record-objects";

/** Most keys one R2 `delete` call takes (and one `list` page gives). */
export const DELETE_KEYS_PER_CALL = 1000;
/** Most `delete` calls one run makes, each after its `list`: up to 100,000 objects a minute. */
export const RETENTION_CALLS_PER_RUN = 100;

/** Deletes expired objects; answers how many objects and copies it deleted, in how many delete calls. */
export async function sweepRecord(
  env: Env,
  svc: Services,
  now: number,
  { calls = RETENTION_CALLS_PER_RUN, perCall = DELETE_KEYS_PER_CALL }: { calls?: number; perCall?: number } = {},
): Promise<{ deleted: number; copies: number; calls: number }> {
  const cutoff = now - svc.config.recordRetentionMs;
  let deleted = 0;
  let copies = 0;
  let made = 0;
  let cursor: string | undefined;
  let more = true;
  while (more && made < calls) {
    const page = await env.RECORD_BUCKET.list({
      prefix: "drops/",
      cursor,
      limit: perCall,
      include: ["customMetadata"],
    });
    const keys: string[] = [];
    let pageCopies = 0;
    for (const obj of page.objects) {
      const hour = hourOfKey(obj.key);
      if (hour === null) continue; // not the record's: never deleted here
      if (hour + HOUR_MS > cutoff) {
        more = false; // this hour and every later one still hold kept copies
        break;
      }
      keys.push(obj.key);
      pageCopies += copiesIn(obj);
    }
    if (keys.length > 0) {
      await env.RECORD_BUCKET.delete(keys);
      made++;
      deleted += keys.length;
      copies += pageCopies;
      svc.metrics.inc("floodgate_record_expired_total", {}, pageCopies);
    }
    // The keys deleted are gone from the next listing; a page of only foreign keys moves the cursor on.
    cursor = page.truncated && keys.length === 0 ? page.cursor : undefined;
    if (!page.truncated) more = false;
  }
  if (deleted > 0) await svc.metrics.flushNow();
  return { deleted, copies, calls: made };
}
