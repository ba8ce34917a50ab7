#!/usr/bin/env node
// `npm run check:openapi`: the document at GET /v1/openapi.json validates as OpenAPI 3.1, and the API
// reference page (/docs/api) and the Swagger UI files it loads are served. Against a Worker started
// the way `npm start` starts it. Run from Node, not in the workerd tests, because the validator
// (@seriousme/openapi-schema-validator) reads its JSON schemas from disk; test/openapi.test.ts checks
// the document's content. `--port=N` picks the Worker's port (default 8797).
import { parseArgs } from "node:util";
import { Validator } from "@seriousme/openapi-schema-validator";
import { startDev } from "./dev-server.mjs";

const { values } = parseArgs({ options: { port: { type: "string", default: "8797" } } });
const server = startDev({ port: Number(values.port), env: { SAMPLER_LOCAL_PERIOD: "0" } });
let failures = 0;
const fail = (what) => {
  failures++;
  console.error(`  ✗ ${what}`);
};

try {
  await server.ready();
  const res = await fetch(`${server.base}/v1/openapi.json`);
  if (res.status !== 200) throw new Error(`GET /v1/openapi.json answered ${res.status}`);
  const document = await res.json();
  if (document.openapi !== "3.1.0") fail(`openapi is ${JSON.stringify(document.openapi)}, not "3.1.0"`);
  const result = await new Validator().validate(document);
  if (result.valid) {
    const count = Object.values(document.paths).reduce((n, ops) => n + Object.keys(ops).length, 0);
    console.log(`  ✓ /v1/openapi.json is a valid OpenAPI ${document.openapi} document (${count} operations)`);
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
    } else console.log(`  ✓ ${path} is served`);
  }
} catch (e) {
  fail(e instanceof Error ? e.message : String(e));
} finally {
  server.stop();
}
console.log(failures === 0 ? "openapi check: passed" : `openapi check: ${failures} failed`);
process.exit(failures === 0 ? 0 : 1);
