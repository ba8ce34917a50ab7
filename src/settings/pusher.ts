/**
 * The Pusher door's settings (docs/operations.md, "The Pusher door"): the app's id, key and secret,
 * the client-event budget of one connection and the activity timeout. The door is open when id, key
 * and secret are all set, closed when none is (an empty value counts as not set); any other
 * combination is bad configuration, so a half-configured door fails closed instead of half working.
 */
import { parseLimit } from "./limits";
import { ConfigError, textOf, wholeNumber, wrap } from "./parsers";
import { secretProblem } from "./secrets";
import type { RawConfig } from "./variables";

/** What `PUSHER_APP_ID` and `PUSHER_APP_KEY` may hold. */
const APP_WORD = /^[A-Za-z0-9_-]{1,64}$/;

/** The secret travels as a secret (`wrangler secret put`), not among the variables. */
export const PUSHER_SECRET = "PUSHER_APP_SECRET";

/** Bounds of `PUSHER_ACTIVITY_TIMEOUT`, in seconds: Pusher's clients ping within it, so it bounds idle cost. */
export const MIN_ACTIVITY_TIMEOUT_S = 10;
export const MAX_ACTIVITY_TIMEOUT_S = 3600;

/** The app the door serves (id, key and secret all set). */
export interface PusherApp {
  id: string;
  key: string;
  secret: string;
}

export interface PusherSettings {
  /** The app, or null: the door is closed. */
  app: PusherApp | null;
  /** Client events one connection may send (`PUSHER_CLIENT_EVENTS_RATE`); null: no budget. */
  clientEvents: { rate: number; perMs: number; burst: number } | null;
  /** Seconds of silence after which the server pings a connection (`PUSHER_ACTIVITY_TIMEOUT`). */
  activityTimeoutS: number;
}

/** Reads the door's variables, and the secret beside them. @throws ConfigError naming the variable */
export function parsePusher(raw: RawConfig, secret: string | undefined): PusherSettings {
  const id = textOf(raw, "PUSHER_APP_ID");
  const key = textOf(raw, "PUSHER_APP_KEY");
  const given = (secret ?? "").trim() === "" ? "" : (secret as string);
  for (const [variable, value] of [
    ["PUSHER_APP_ID", id],
    ["PUSHER_APP_KEY", key],
  ] as const) {
    if (value !== "" && !APP_WORD.test(value)) {
      throw new ConfigError(variable, `"${value}" must be 1 to 64 characters of A-Z a-z 0-9 _ -`);
    }
  }
  const set = [id, key, given].filter((v) => v !== "").length;
  if (set > 0 && set < 3) {
    const missing = id === "" ? "PUSHER_APP_ID" : key === "" ? "PUSHER_APP_KEY" : PUSHER_SECRET;
    throw new ConfigError(
      missing,
      "is not set: the Pusher door needs PUSHER_APP_ID, PUSHER_APP_KEY and PUSHER_APP_SECRET all set (or none, to keep it closed)",
    );
  }
  if (set === 3) {
    const problem = secretProblem(PUSHER_SECRET, given);
    if (problem) throw new ConfigError(PUSHER_SECRET, problem.replace(`${PUSHER_SECRET} `, ""));
  }
  const clientEvents = wrap("PUSHER_CLIENT_EVENTS_RATE", () =>
    parseLimit(textOf(raw, "PUSHER_CLIENT_EVENTS_RATE", false)),
  );
  return {
    app: set === 3 ? { id, key, secret: given } : null,
    clientEvents,
    activityTimeoutS: wholeNumber(raw, "PUSHER_ACTIVITY_TIMEOUT", MIN_ACTIVITY_TIMEOUT_S, MAX_ACTIVITY_TIMEOUT_S),
  };
}
