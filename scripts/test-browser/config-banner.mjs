// The dashboard under bad configuration: a banner with the server's message instead of the error line.
import { check } from "../lib/checks.mjs";

/**
 * Bad configuration: every route answers 500 naming the variable (src/worker/app.ts); the page shows a
 * banner with the message, on the login screen too, for as long as it lasts, and drops it with the
 * first good answer. The answer is the Worker's own shape, served here for the overview only.
 */
export async function checkConfigBanner(page) {
  const bad = {
    code: "internal",
    msg: 'invalid configuration: PUBLISH_RATE: "abc" is not a rate: expected <integer>/<window> such as 500/s',
    meta: { code: "INTERNAL", variable: "PUBLISH_RATE" },
  };
  const refuse = (route) => route.fulfill({ status: 500, json: bad });
  await page.route("**/v1/admin/overview*", refuse);
  await page.waitForSelector("#config-banner", { state: "visible", timeout: 10_000 });
  const text = await page.textContent("#config-banner");
  check(
    text.includes(bad.msg) && text.includes("wrangler.toml"),
    "bad configuration shows a banner with the server's message and where to fix it",
  );
  const errorLine = await page.isVisible("#app-error");
  check(!errorLine, "… instead of the error line");
  await page.unroute("**/v1/admin/overview*", refuse);
  await page.waitForSelector("#config-banner", { state: "hidden", timeout: 10_000 });
  check(true, "… and the banner goes with the first good answer");
}
