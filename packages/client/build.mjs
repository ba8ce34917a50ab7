// `npm run build`: dist/ from scratch. tsc (tsconfig.build.json) emits the client and the parts of the
// repository's src/wire/ it imports, each under its own path from the repository root:
//   dist/packages/client/src/*.js, *.d.ts   the client
//   dist/src/wire/*.js, *.d.ts              the wire modules it imports (pure: they import nothing else)
// then the package's entry, dist/index.js and dist/index.d.ts, re-exports the client's index from there
// (dist/index.js is also the file a browser's import map names).
import { execFileSync } from "node:child_process";
import { rmSync, writeFileSync } from "node:fs";
import { createRequire } from "node:module";
import { fileURLToPath } from "node:url";

const here = fileURLToPath(new URL(".", import.meta.url));
const dist = new URL("dist/", import.meta.url);
rmSync(dist, { recursive: true, force: true });
const tsc = createRequire(import.meta.url).resolve("typescript/bin/tsc");
execFileSync(process.execPath, [tsc, "-p", "tsconfig.build.json"], { cwd: here, stdio: "inherit" });
const entry = 'export * from "./packages/client/src/index.js";\n';
writeFileSync(new URL("index.js", dist), entry);
writeFileSync(new URL("index.d.ts", dist), entry);
