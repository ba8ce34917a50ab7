/**
 * The last frame of a subscription whose token expired (docs/api.md, "How long a subscription lasts"):
 * `seq` is the last seq the subscriber was sent or is past (its resume floor when it was sent nothing
 * since it connected), so the client resumes with `?after=<seq>` and misses nothing published while
 * it fetches a fresh token — even on a quiet channel, where it holds no seq of its own.
 */
import { TOKEN_EXPIRED_REASON } from "../relay/bounds";

export function expiredFrame(seq: number): string {
  return `{"type":"expired","reason":${JSON.stringify(TOKEN_EXPIRED_REASON)},"seq":${seq}}`;
}
