// @ts-check
// Calls to the server's API with the admin token, and what their errors say (docs/api.md, errors).

import { $ } from "./dom.js";

/** The admin token every call carries: set by logging in (session.js), null when logged out. */
export const credentials = {
  /** @type {string | null} */
  token: null,
};

export class HttpError extends Error {
  /**
   * @param {number} status
   * @param {{ msg?: string, meta?: { variable?: string } } | null} body
   * @param {number | null} [retryAfter] seconds, from a 429's Retry-After
   */
  constructor(status, body, retryAfter = null) {
    super(body?.msg ?? `HTTP ${status}`);
    this.status = status;
    this.retryAfter = retryAfter;
    /** The variable a 500 names when the server's configuration is bad (docs/api.md, errors). */
    this.variable = status === 500 ? (body?.meta?.variable ?? null) : null;
  }
}

/**
 * Calls the API with the admin token. An aborted call rejects with the fetch's AbortError.
 * @param {string} path
 * @param {RequestInit} [init]
 * @returns {Promise<any>} the JSON body, or null for 204
 */
export async function api(path, init = {}) {
  let res;
  try {
    res = await fetch(path, {
      ...init,
      headers: {
        authorization: `Bearer ${credentials.token}`,
        "content-type": "application/json",
        ...(init.headers ?? {}),
      },
    });
  } catch (e) {
    if (init.signal?.aborted) throw e;
    throw new HttpError(0, { msg: "Cannot reach the server. Is it running (npm start)?" });
  }
  if (res.status === 204) return null;
  const text = await res.text();
  let body = null;
  try {
    body = JSON.parse(text);
  } catch {
    body = text;
  }
  if (!res.ok) {
    const retryAfter = Number(res.headers.get("retry-after")) || null;
    const err = new HttpError(res.status, typeof body === "object" ? body : { msg: `HTTP ${res.status}` }, retryAfter);
    renderConfigBanner(err.variable ? err.message : null);
    throw err;
  }
  renderConfigBanner(null);
  return body;
}

/**
 * The bad-configuration banner: shown, on the login screen too, for as long as the server answers
 * with a configuration error (every route does, naming the variable), gone with its first good answer.
 * @param {string | null} message
 */
function renderConfigBanner(message) {
  const banner = $("#config-banner");
  banner.hidden = !message;
  if (!message) return;
  $(".message", banner).textContent = message;
}

/** @param {unknown} e */
export function statusOf(e) {
  return e instanceof HttpError ? e.status : null;
}

/** @param {unknown} e */
export function messageOf(e) {
  return e instanceof Error ? e.message : String(e);
}
