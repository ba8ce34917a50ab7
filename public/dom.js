// @ts-check
// The page's elements: finding them and showing or hiding them.

/**
 * The element `sel` matches, which the page is known to have (a missing one is a bug in the page).
 * @param {string} sel
 * @param {ParentNode} [root]
 * @returns {HTMLElement}
 */
export function $(sel, root = document) {
  const el = root.querySelector(sel);
  if (!el) throw new Error(`dashboard: no ${sel}`);
  return /** @type {HTMLElement} */ (el);
}

/**
 * @param {string} id
 * @param {boolean} visible
 */
export function show(id, visible) {
  $(id).hidden = !visible;
}

/**
 * @param {HTMLElement} el
 * @param {string | null} message
 */
export function setError(el, message) {
  el.textContent = message ?? "";
  el.hidden = !message;
}
