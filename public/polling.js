// @ts-check
// Polling the overview every POLL_MS while logged in and the page is visible, one poll at a time;
// the toolbar's status line and its "Run sampler now" button; what a failed call shows.

import { api, credentials, HttpError, messageOf, statusOf } from "./api.js";
import { $, setError } from "./dom.js";
import { clockTime } from "./format.js";
import { render } from "./overview.js";

/** @import { CardActions, Overview, SamplerReport } from "./types.js" */

const POLL_MS = 2000;

const state = {
  /** Whether polling runs (logged in and the page visible). */
  polling: false,
  /** @type {ReturnType<typeof setTimeout> | undefined} The next poll, once the last one finished. */
  timer: undefined,
  /** @type {AbortController | null} The poll in flight. */
  inFlight: null,
};

/** @type {CardActions} After a card's call succeeds the page polls at once; a 401 logs it out. */
const cardActions = { refresh: poll, fail: handleError };

/** Polls now and then every POLL_MS, unless the page is hidden (it resumes when shown). */
export function startPolling() {
  state.polling = document.visibilityState !== "hidden";
  if (state.polling) poll();
}

/** Stops polling: cancels the next poll and aborts the one in flight. */
export function stopPolling() {
  state.polling = false;
  clearTimeout(state.timer);
  state.inFlight?.abort();
  state.inFlight = null;
}

/**
 * One poll. The next is scheduled only when this one has finished, so polls never overlap; a poll
 * started meanwhile (after an action) aborts this one and takes over the schedule.
 */
async function poll() {
  clearTimeout(state.timer);
  state.inFlight?.abort();
  const ctl = new AbortController();
  state.inFlight = ctl;
  try {
    /** @type {Overview} */
    const overview = await api("/v1/admin/overview", { signal: ctl.signal });
    if (ctl.signal.aborted) return;
    setError($("#app-error"), null);
    $("#status").textContent = `Updated ${clockTime(Date.now())}`;
    render(overview, cardActions);
  } catch (e) {
    if (!ctl.signal.aborted) handleError(e);
  } finally {
    if (state.inFlight === ctl) {
      state.inFlight = null;
      if (state.polling) state.timer = setTimeout(poll, POLL_MS);
    }
  }
}

// A hidden page neither polls nor keeps a poll waiting; it catches up at once when shown again.
document.addEventListener("visibilitychange", () => {
  if (!credentials.token || $("#app").hidden) return;
  if (document.visibilityState === "hidden") stopPolling();
  else if (!state.polling) startPolling();
});
window.addEventListener("pagehide", () => stopPolling());
// A page restored from the back/forward cache was stopped by its pagehide.
window.addEventListener("pageshow", (ev) => {
  if (ev.persisted && credentials.token && !$("#app").hidden && !state.polling) startPolling();
});

$("#sample").addEventListener("click", async () => {
  const btn = /** @type {HTMLButtonElement} */ ($("#sample"));
  btn.disabled = true;
  try {
    /** @type {SamplerReport} */
    const report = await api("/v1/admin/sample", { method: "POST" });
    const written = report.channels.filter((c) => c.written || c.deleted).length;
    $("#status").textContent =
      `Sampler: ${report.channels.length} channels visited, ${written} rates written or released`;
    await poll();
  } catch (e) {
    handleError(e);
  } finally {
    btn.disabled = false;
  }
});

/**
 * What a failed call shows: nothing more for bad configuration (the banner says it), the login
 * screen for a refused token, the error line for the rest.
 * @param {unknown} e
 */
function handleError(e) {
  if (e instanceof HttpError && e.variable) {
    setError($("#app-error"), null); // the banner says it
    return;
  }
  if (statusOf(e) === 401) {
    $("#logout").click();
    setError($("#login-error"), "The admin token is no longer accepted. Log in again.");
    return;
  }
  setError($("#app-error"), messageOf(e));
}
