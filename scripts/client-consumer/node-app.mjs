// The consumer's Node entry: `node node-app.mjs '{"base":…,"token":…,"limitedToken":…,"prefix":…}'`.
import { run } from "./consumer.mjs";

const options = JSON.parse(process.argv[2]);
try {
  await run({ ...options, log: (line) => console.log(`ok ${line}`) });
  process.exit(0);
} catch (e) {
  console.log(`FAIL ${e instanceof Error ? e.message : String(e)}`);
  // Exit now: after a failed step a subscription may still be retrying and would keep Node alive.
  process.exit(1);
}
