// The consumer's Node entry: `node node-app.mjs '{"base":…,"token":…,"limitedToken":…,"prefix":…}'`.
import { createRequire } from "node:module";
import { run } from "./consumer.mjs";

const options = JSON.parse(process.argv[2]);
// docs/client.md: the package is ES modules, and `require()` loads it on the Nodes that load ES
// modules from require (20.19+, 22.12+): both Nodes of this test.
const required = createRequire(import.meta.url)("@floodgate/client");
if (typeof required.FloodgateClient !== "function" || typeof required.mintTokens !== "function") {
  console.log('FAIL require("@floodgate/client") does not give the client');
  process.exit(1);
}
console.log(`ok require("@floodgate/client") gives the same exports as import (Node ${process.versions.node})`);
try {
  await run({ ...options, log: (line) => console.log(`ok ${line}`) });
  process.exit(0);
} catch (e) {
  console.log(`FAIL ${e instanceof Error ? e.message : String(e)}`);
  // Exit now: after a failed step a subscription may still be retrying and would keep Node alive.
  process.exit(1);
}
