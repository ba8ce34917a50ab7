// @ts-check
// Logging in and out. The admin token stays in this tab (session storage) and is sent only to this
// server; logging in checks it with one overview call before the page shows.

import { api, credentials, HttpError, messageOf, statusOf } from "./api.js";
import { $, setError, show } from "./dom.js";
import { clearOverview } from "./overview.js";
import { startPolling, stopPolling } from "./polling.js";

const TOKEN_KEY = "floodgate.admin";

/** Opens the page: the dashboard if this tab holds a token from an earlier login, else the login screen. */
export function boot() {
  credentials.token = sessionStorage.getItem(TOKEN_KEY);
  if (credentials.token) start();
  else show("#login", true);
}

function start() {
  show("#login", false);
  show("#app", true);
  show("#toolbar", true);
  startPolling();
}

/**
 * What a refused login says. A 429 is the server's budget on failed admin logins from this address
 * (docs/security.md): every login is refused until it refills, the right token included.
 * @param {unknown} e
 */
function loginError(e) {
  if (e instanceof HttpError && e.variable)
    return "The server cannot log anyone in until its configuration is fixed (above).";
  if (statusOf(e) === 401)
    return "That token was refused. Use the server's ADMIN_TOKEN (locally: dev-only-admin-token, from .dev.vars).";
  if (statusOf(e) === 429) {
    const wait = e instanceof HttpError && e.retryAfter ? e.retryAfter : 60;
    return `Too many failed logins from this address: wait ${wait} s before trying again.`;
  }
  return messageOf(e);
}

$("#login-form").addEventListener("submit", async (ev) => {
  ev.preventDefault();
  const token = /** @type {HTMLInputElement} */ ($("#token")).value.trim();
  credentials.token = token;
  setError($("#login-error"), null);
  try {
    await api("/v1/admin/overview");
  } catch (e) {
    setError($("#login-error"), loginError(e));
    credentials.token = null;
    return;
  }
  sessionStorage.setItem(TOKEN_KEY, token);
  start();
});

$("#logout").addEventListener("click", () => {
  sessionStorage.removeItem(TOKEN_KEY);
  credentials.token = null;
  stopPolling();
  clearOverview();
  show("#app", false);
  show("#toolbar", false);
  show("#login", true);
});
