#!/usr/bin/env node
// `npm run check:openapi`: the document at GET /v1/openapi.json validates as OpenAPI 3.1, and the API
// reference page (/docs/api) and the Swagger UI files it loads are served. Against a Worker started
// the way `npm start` starts it. Run from Node, not in the workerd tests, because the validator
// (@seriousme/openapi-schema-validator) reads its JSON schemas from disk;
// test/worker/http/openapi-document.test.ts checks the document's content. When Chromium is there
// (/usr/bin/chromium, or CHROMIUM_PATH; .ci/run installs it for the browser test), the page is also
// opened: it must list every operation of the document with no CSP violation. `--port=N` picks the
// Worker's port (default 8797).
import { existsSync } from "node:fs";
import { Validator } from "@seriousme/openapi-schema-validator";
import { chromium } from "playwright-core";
import { fail, finish, pass } from "./lib/checks.mjs";
import { startDev } from "./lib/dev-server.mjs";
import { options } from "./lib/options.mjs";

const { port } = options("check:openapi", { port: 8797 });
const server = startDev({ port, env: { SAMPLER_LOCAL_PERIOD: "0" } });

try {
  await server.ready();
  const res = await fetch(`${server.base}/v1/openapi.json`);
  if (res.status !== 200) throw new Error(`GET /v1/openapi.json answered ${res.status}`);
  const document = await res.json();
  if (document.openapi !== "3.1.0") fail(`openapi is ${JSON.stringify(document.openapi)}, not "3.1.0"`);
  const result = await new Validator().validate(document);
  if (result.valid) {
    const count = Object.values(document.paths).reduce((n, ops) => n + Object.keys(ops).length, 0);
    pass(`/v1/openapi.json is a valid OpenAPI ${document.openapi} document (${count} operations)`);
  } else {
    fail(`/v1/openapi.json is not valid OpenAPI 3.1:\n${JSON.stringify(result.errors, null, 2)}`);
  }
  for (const [path, type, needle] of [
    ["/docs/api", "text/html", "/vendor/swagger-ui/swagger-ui-bundle.js"],
    ["/docs/api.js", "javascript", "/v1/openapi.json"],
    ["/vendor/swagger-ui/swagger-ui-bundle.js", "javascript", "SwaggerUIBundle"],
    ["/vendor/swagger-ui/swagger-ui.css", "text/css", ".swagger-ui"],
  ]) {
    const page = await fetch(`${server.base}${path}`);
    const text = await page.text();
    if (page.status !== 200 || !(page.headers.get("content-type") ?? "").includes(type) || !text.includes(needle)) {
      fail(`${path}: ${page.status} ${page.headers.get("content-type")}, expected ${type} holding ${needle}`);
    } else pass(`${path} is served`);
  }
  const CHROMIUM = process.env.CHROMIUM_PATH ?? "/usr/bin/chromium";
  const operations = Object.values(document.paths).flatMap((ops) => Object.keys(ops)).length;
  if (existsSync(CHROMIUM)) await checkPage(CHROMIUM, operations);
  else console.log(`  - no Chromium at ${CHROMIUM}: the page was not opened`);
} catch (e) {
  fail(e instanceof Error ? e.message : String(e));
} finally {
  server.stop();
}
/** Opens /docs/api: it must render `operations` operations, with no CSP violation. */
async function checkPage(executablePath, operations) {
  const browser = await chromium.launch({ executablePath, args: ["--headless", "--no-sandbox", "--disable-gpu"] });
  try {
    const page = await browser.newPage();
    await page.addInitScript(() => {
      window.__cspViolations = [];
      document.addEventListener("securitypolicyviolation", (e) =>
        window.__cspViolations.push(`${e.violatedDirective} ${e.blockedURI}`),
      );
    });
    await page.goto(`${server.base}/docs/api`);
    await page.waitForSelector(".opblock", { timeout: 30_000 });
    const shown = await page.locator(".opblock").count();
    const violations = await page.evaluate(() => window.__cspViolations);
    if (shown !== operations) fail(`/docs/api shows ${shown} operations, the document has ${operations}`);
    else if (violations.length > 0) fail(`/docs/api: CSP violations: ${violations.join(", ")}`);
    else pass(`/docs/api renders all ${shown} operations in Chromium, with no CSP violation`);
  } finally {
    await browser.close();
  }
}

finish("check:openapi");
