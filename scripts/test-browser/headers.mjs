// The dashboard's security headers: its files carry public/_headers' CSP, nosniff and
// X-Frame-Options, the headers file itself is not served, and the page runs with no CSP violation.
import { check } from "../lib/checks.mjs";
import { BASE } from "./setup.mjs";

/** The dashboard's files carry the headers of public/_headers (served by the assets layer). */
export async function checkAssetHeaders() {
  for (const path of ["/", "/app.js"]) {
    const res = await fetch(`${BASE}${path}`);
    await res.arrayBuffer();
    const csp = res.headers.get("content-security-policy") ?? "";
    check(
      res.status === 200 &&
        csp.includes("script-src 'self'") &&
        csp.includes("frame-ancestors 'none'") &&
        res.headers.get("x-content-type-options") === "nosniff" &&
        res.headers.get("x-frame-options") === "DENY",
      `${path} carries the dashboard's CSP, nosniff and X-Frame-Options (CSP ${JSON.stringify(csp)})`,
    );
  }
  const headersFile = await fetch(`${BASE}/_headers`);
  const text = await headersFile.text();
  check(!text.includes("Content-Security-Policy"), "public/_headers itself is not served");
  const tsconfig = await fetch(`${BASE}/tsconfig.json`);
  check(!(await tsconfig.text()).includes("compilerOptions"), "public/tsconfig.json is not served (.assetsignore)");
}

/** Records every CSP violation the page reports (a blocked script, style or request), for the end. */
export async function watchCspViolations(page) {
  await page.addInitScript(() => {
    window.__cspViolations = [];
    document.addEventListener("securitypolicyviolation", (e) =>
      window.__cspViolations.push(`${e.violatedDirective} ${e.blockedURI}`),
    );
  });
}

/** The page ran under its CSP with no violation since `watchCspViolations`. */
export async function checkNoCspViolation(page) {
  const violations = await page.evaluate(() => window.__cspViolations);
  check(violations.length === 0, `the dashboard runs under its CSP with no violation (${JSON.stringify(violations)})`);
}
